#!/bin/sh
# compare-mpi.sh: libccl's all_reduce_perf against all_reduce_perf_mpi (Open
# MPI) on this machine, same flags, same timing, same columns:
#
#   bench/compare-mpi.sh [-B BUILD_DIR] [-r "2 4"] [-b MIN] [-e MAX] [-n ITERS] [-w WARMUP] [-s] OUT_DIR
#
# For each rank count, over shared memory (libccl --transport shm; Open MPI --mca btl
# self,vader) and over TCP on the loopback (libccl --transport tcp with one
# CCL_HOST_ID per rank; Open MPI --mca btl self,tcp), it runs both programs
# one after the other and writes OUT_DIR/{libccl,mpi}-{shm,tcp}-N.csv (the
# benchmarks' CSV format) and .txt (their text output), then
# OUT_DIR/ratios.csv, and prints a table of
# out-of-place busbw per size with the libccl/MPI ratio. Defaults: build/,
# 2 and 4 ranks, 8 B to 64 MiB, nccl-tests' 20 iterations after 5 warm-ups.
# -s passes --steady to both programs (blocks timed in a slow spell of the
# machine are timed again; bench/README.md, "Comparing fairly").
# Compare ratios from one run; absolute numbers move between runs.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build ranks="2 4" min=8 max=64M iters=20 warmup=5 steady=
usage() {
  echo "usage: $0 [-B BUILD_DIR] [-r \"2 4\"] [-b MIN] [-e MAX] [-n ITERS] [-w WARMUP] [-s] OUT_DIR" >&2
  exit 2
}
while getopts B:r:b:e:n:w:sh o; do
  case $o in
    B) build=$OPTARG ;; r) ranks=$OPTARG ;; b) min=$OPTARG ;; e) max=$OPTARG ;;
    n) iters=$OPTARG ;; w) warmup=$OPTARG ;; s) steady=--steady ;; *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
out=$1
ccl=$build/bench/all_reduce_perf
mpi=$build/bench/mpi/all_reduce_perf_mpi
[ -x "$ccl" ] || { echo "$0: no $ccl: build first (cmake -S . -B build && cmake --build build)" >&2; exit 1; }
[ -x "$mpi" ] || { echo "$0: no $mpi: install libopenmpi-dev openmpi-bin and rebuild" >&2; exit 1; }
command -v mpirun.openmpi >/dev/null || { echo "$0: no mpirun.openmpi (apt-get install openmpi-bin)" >&2; exit 1; }
mkdir -p "$out"

# Open MPI refuses root unless told; more ranks than cores needs --oversubscribe.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
sweep="-b $min -e $max -f 2 -n $iters -w $warmup $steady"

for n in $ranks; do
  for t in shm tcp; do
    echo "== $n ranks, $t" >&2
    if [ $t = shm ]; then
      ccl_flags="--transport shm"
      btl="self,vader"
    else
      ccl_flags="--transport tcp --host-per-rank"
      btl="self,tcp --mca btl_tcp_if_include lo"
    fi
    # shellcheck disable=SC2086 # word splitting of the flag lists is intended
    "$ccl" --ranks "$n" $ccl_flags $sweep --csv "$out/libccl-$t-$n.csv" >"$out/libccl-$t-$n.txt"
    # shellcheck disable=SC2086
    mpirun.openmpi -np "$n" --oversubscribe --mca btl $btl "$mpi" $sweep --csv "$out/mpi-$t-$n.csv" >"$out/mpi-$t-$n.txt"
  done
done

# Join on size: out-of-place busbw of each, and their ratio.
echo "transport,nranks,size_bytes,libccl_busbw_gbps,mpi_busbw_gbps,ratio" >"$out/ratios.csv"
for n in $ranks; do
  for t in shm tcp; do
    awk -F, -v t=$t -v n="$n" '
      FNR == 1 { file++; next }
      $12 != "out" { next }
      file == 1 { ccl[$10] = $15; order[++rows] = $10; next }
      { mpi[$10] = $15 }
      END {
        for (i = 1; i <= rows; i++) {
          s = order[i]
          if (!(s in mpi)) continue
          printf "%s,%s,%s,%s,%s,%s\n", t, n, s, ccl[s], mpi[s], (mpi[s] > 0 ? sprintf("%.3f", ccl[s] / mpi[s]) : "")
        }
      }' "$out/libccl-$t-$n.csv" "$out/mpi-$t-$n.csv" >>"$out/ratios.csv"
  done
done
awk -F, 'NR > 1 {
    if ($1 != t || $2 != n) { t = $1; n = $2; printf "\n# %s, %s ranks: out-of-place busbw (GB/s)\n%12s %12s %12s %8s\n", t, n, "size(B)", "libccl", "mpi", "ratio" }
    printf "%12s %12.3f %12.3f %8s\n", $3, $4, $5, $6
  }' "$out/ratios.csv"
echo "# results in $out" >&2
