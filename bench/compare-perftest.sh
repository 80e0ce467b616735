#!/bin/sh
# compare-perftest.sh: libccl over RDMA against perftest on the same two
# devices, in one go, alternating the two sides ROUNDS times (libccl first
# in odd rounds, its peer first in even ones) and reporting medians and
# their ratios:
#
#   bench/compare-perftest.sh [-B BUILD_DIR] [-r ROUNDS] [-d DEV0,DEV1] OUT_DIR
#
# - bandwidth: sendrecv_perf over ib on 2 ranks (each sends to and receives
#   from the other at once) against ib_write_bw -b (bidirectional RDMA
#   WRITE), at 1 MiB and 4 MiB; the ratio is libccl's busbw (bytes one way
#   per second) over half of perftest's two-way figure;
# - latency: pingpong_perf's time for 8 bytes (half a round trip, the mean
#   over a timed block) against ib_send_lat's for 8 bytes (half a round trip
#   too): its mean (t_avg), the same statistic, and its median iteration
#   (t_typical), which leaves out the slow iterations a mean counts; and
#   for the record sendrecv_perf's 8-byte time (both ranks send at once);
# - all_reduce_perf over ib on 2 ranks against Open MPI over UCX
#   (all_reduce_perf_mpi, pml ucx on rc_verbs, one device per rank) at 1, 4
#   and 16 MiB, when mpirun.openmpi, UCX's verbs transport and the MPI twin
#   are there (the summary says why not otherwise), with soft-RoCE's count
#   of retransmissions during each side's runs.
# Each ratio comes with the range of the rounds' own ratios.
#
# Rank 0 uses DEV0 and rank 1 DEV1 (default rxe0,rxe1), each as its own
# host, so traffic crosses from one adapter to the other as perftest's does.
# Made for tools/rdma-vm.sh's VM (soft-RoCE, CPU-bound: compare ratios, not
# figures):
#
#   tools/rdma-vm.sh -w /tmp/out 'bench/compare-perftest.sh /tmp/out'
#
# Writes OUT_DIR/raw.txt (every figure) and OUT_DIR/summary.txt.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=$top/build rounds=3 devs=rxe0,rxe1
usage() { echo "usage: $0 [-B BUILD_DIR] [-r ROUNDS] [-d DEV0,DEV1] OUT_DIR" >&2; exit 2; }
while getopts B:r:d:h o; do
  case $o in B) build=$OPTARG ;; r) rounds=$OPTARG ;; d) devs=$OPTARG ;; *) usage ;; esac
done
shift $((OPTIND - 1))
[ $# -eq 1 ] || usage
out=$1
mkdir -p "$out"
dev0=${devs%,*} dev1=${devs#*,}
for t in ib_write_bw ib_send_lat; do
  command -v $t >/dev/null || { echo "$0: no $t (apt-get install perftest)" >&2; exit 77; }
done
raw=$out/raw.txt
: >"$raw"
export CCL_TUNING_FILE=${CCL_TUNING_FILE:-none}
port=18515
ar_sizes="1048576 4194304 16777216"

# Open MPI over UCX, restricted to the verbs transports (rc_verbs for data,
# ud_verbs for UCX's own connection set-up over RoCE) so that its traffic
# crosses the same two adapters as libccl's; no shared memory.
mpi_bin=$build/bench/mpi/all_reduce_perf_mpi
mpi_why=""
command -v mpirun.openmpi >/dev/null || mpi_why="no mpirun.openmpi (apt-get install openmpi-bin)"
[ -n "$mpi_why" ] || [ -x "$mpi_bin" ] || mpi_why="no $mpi_bin (install libopenmpi-dev, rebuild)"
[ -n "$mpi_why" ] || ls /usr/lib/x86_64-linux-gnu/ucx/libuct_ib.so* >/dev/null 2>&1 || mpi_why="no UCX verbs transport (libuct_ib, package libucx0)"
[ "$(hostname)" != "(none)" ] || hostname rdma-vm # Open MPI refuses a host named "(none)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi_ucx() { # all_reduce_perf_mpi's arguments
  timeout 600 mpirun.openmpi -np 2 --mca pml ucx --mca btl self --mca osc ^ucx \
    -x UCX_TLS=rc_verbs,ud_verbs,self -x UCX_IB_GID_INDEX=0 \
    sh -c 'UCX_NET_DEVICES=$(echo "$0" | cut -d, -f$((OMPI_COMM_WORLD_RANK + 1))):1 exec "$@"' "$devs" "$mpi_bin" "$@"
}

# perftest: server on dev1, client on dev0, over the loopback for set-up.
perftest() { # tool, then its arguments; prints the client's output
  tool=$1
  shift
  port=$((port + 1))
  "$tool" -d "$dev1" -x 0 -p $port "$@" >/dev/null 2>&1 &
  server=$!
  sleep 1
  "$tool" -d "$dev0" -x 0 -p $port "$@" 127.0.0.1 2>&1 || true
  wait $server || true
}
rdma_count() { # one hw_counter, summed over both devices
  cat /sys/class/infiniband/"$dev0"/ports/*/hw_counters/"$1" /sys/class/infiniband/"$dev1"/ports/*/hw_counters/"$1" \
    2>/dev/null | awk '{s += $1} END {print s + 0}'
}
# soft-RoCE's own count of retransmissions over both devices, as
# "retries duplicates sequence-errors": a retry sends again what followed
# the last acknowledgement, work the round's time includes.
rdma_counters() {
  echo "$(rdma_count completer_retry_err) $(rdma_count duplicate_request)" \
    $(($(rdma_count rcvd_seq_err) + $(rdma_count out_of_seq_request)))
}
have_counters=$(ls /sys/class/infiniband/"$dev0"/ports/*/hw_counters/completer_retry_err 2>/dev/null || true)
retries_since() { # side, size, the counts before: records their growth since
  [ -n "$have_counters" ] || return 0
  # shellcheck disable=SC2046,SC2086 # the words are the counts
  set -- "$1" "$2" $3 $(rdma_counters)
  echo "round $r $1_rdma_retries $2 $(($6 - $3)) $(($7 - $4)) $(($8 - $5))" >>"$raw"
}
ccl() { # benchmark, then its arguments: 2 ranks, one device and host each
  "$build/tools/cclrun" -n 2 --host-per-rank --transport ib --timeout 300 -- \
    sh -c 'CCL_IB_HCA=$(echo "$0" | cut -d, -f$((CCL_RANK + 1))) exec "$@"' "$devs" "$build/bench/$@"
}

# Each figure of a side, for the size in $size; a round runs the two sides
# of each comparison in turn, libccl first in odd rounds and its peer first
# in even ones, so that neither side always follows the other (the VM's
# speed drifts within seconds).
bw_peer() {
  bw=$(perftest ib_write_bw -b -s $size -n 200 -F --report_gbits | awk -v s=$size '$1 == s {print $4; exit}')
  echo "round $r perftest_write_bw_bidir_gbit $size ${bw:-nan}" >>"$raw"
}
bw_ccl() { # busbw from the time column (the printed one has two decimals)
  line=$(ccl sendrecv_perf -b $size -e $size -n 50 -w 5 -c 0 | awk -v s=$size '$2 == s {print; exit}')
  echo "round $r ccl_sendrecv_busbw_GBps $size $(echo "$line" | awk '{printf "%.5f", $2 / $7 / 1000}')" >>"$raw"
}
# t_typical (the median iteration) and t_avg (the mean, what
# pingpong_perf's time is: a timed block over its iterations)
lat_peer() {
  lat=$(perftest ib_send_lat -s 8 -n 2000 -F | awk '$1 == 8 {print $5, $6; exit}')
  echo "round $r perftest_send_lat_us 8 ${lat% *}" >>"$raw"
  echo "round $r perftest_send_lat_avg_us 8 ${lat#* }" >>"$raw"
}
lat_ccl() {
  line=$(ccl pingpong_perf -b 8 -e 8 -n 2000 -w 100 -c 0 | awk '$2 == 8 {print; exit}')
  echo "round $r ccl_pingpong_time_us 8 $(echo "$line" | awk '{print $7}')" >>"$raw"
  line=$(ccl sendrecv_perf -b 8 -e 8 -n 2000 -w 100 -c 0 | awk '$2 == 8 {print; exit}')
  echo "round $r ccl_sendrecv_time_us 8 $(echo "$line" | awk '{print $7}')" >>"$raw"
}
ar_ccl() {
  before=$(rdma_counters)
  line=$(ccl all_reduce_perf -b $size -e $size -n $iters -w 3 -c 0 | awk -v s=$size '$2 == s {print; exit}')
  retries_since ccl $size "$before"
  echo "round $r ccl_all_reduce_busbw_GBps $size $(echo "$line" | awk '{printf "%.5f", $2 / $7 / 1000}')" >>"$raw"
}
ar_peer() {
  [ -z "$mpi_why" ] || return 0
  before=$(rdma_counters)
  line=$(mpi_ucx -b $size -e $size -n $iters -w 3 -c 0 2>&1 | awk -v s=$size '$1 == s {print; exit}')
  retries_since ucx $size "$before"
  echo "round $r mpi_ucx_all_reduce_busbw_GBps $size $(echo "$line" | awk '$6 > 0 {printf "%.5f", $1 / $6 / 1000; exit} {print "nan"}')" >>"$raw"
}
in_turn() { # libccl's side, then its peer's: run in this round's order
  if [ $((r % 2)) -eq 1 ]; then "$1"; "$2"; else "$2"; "$1"; fi
}

for r in $(seq 1 "$rounds"); do
  for size in 1048576 4194304; do
    in_turn bw_ccl bw_peer
  done
  in_turn lat_ccl lat_peer
  for size in $ar_sizes; do
    iters=$((20 * 1048576 / size + 3))
    in_turn ar_ccl ar_peer
  done
  echo "compare-perftest: round $r of $rounds done" >&2
done

# Medians per (what, size), then the ratios, each with the range of the
# rounds' own ratios (a round's two sides ran a few seconds apart, so the
# range shows how far the VM's speed moved the comparison).
awk -v mpi_why="$mpi_why" -v ar_sizes="$ar_sizes" -v rounds="$rounds" '
  $3 ~ /_rdma_retries$/ { retries[$3 " " $4] += $5; dups[$3 " " $4] += $6; seqerr[$3 " " $4] += $7; next }
  { v[$3 " " $4] = v[$3 " " $4] " " $5; at[$3 " " $4 " " $2] = $5 }
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  # The range over rounds of (ka / kb) * scale, "" when no round has both.
  function spread(ka, kb, scale,   r, x, lo, hi, n) {
    for (r = 1; r <= rounds; r++) {
      if (!((ka " " r) in at) || !((kb " " r) in at) || at[kb " " r] + 0 <= 0) continue
      x = at[ka " " r] / at[kb " " r] * scale
      if (!n++ || x < lo) lo = x
      if (n == 1 || x > hi) hi = x
    }
    return n ? sprintf(" (rounds %.2f-%.2f)", lo, hi) : ""
  }
  function retrans(side, s,   k) {
    k = side "_rdma_retries " s
    return (k in retries) ? sprintf("%d retransmissions (%d duplicate packets, %d sequence errors)", retries[k], dups[k], seqerr[k]) : "no soft-RoCE counters"
  }
  END {
    for (k in v) m[k] = median(v[k])
    for (s = 1048576; s <= 4194304; s *= 4) {
      pt = m["perftest_write_bw_bidir_gbit " s] / 8 / 2
      cc = m["ccl_sendrecv_busbw_GBps " s]
      printf "bandwidth %7d B: libccl sendrecv %.3f GB/s each way, ib_write_bw -b %.3f GB/s each way: ratio %.2f%s\n", s, cc, pt, (pt > 0 ? cc / pt : 0), spread("ccl_sendrecv_busbw_GBps " s, "perftest_write_bw_bidir_gbit " s, 16)
    }
    pl = m["perftest_send_lat_us 8"]; pa = m["perftest_send_lat_avg_us 8"]; cl = m["ccl_pingpong_time_us 8"]
    printf "latency 8 B, mean: libccl pingpong %.2f us, ib_send_lat t_avg %.2f us: ratio %.2f%s\n", cl, pa, (pa > 0 ? cl / pa : 0), spread("ccl_pingpong_time_us 8", "perftest_send_lat_avg_us 8", 1)
    printf "latency 8 B: libccl pingpong mean %.2f us, ib_send_lat t_typical (median) %.2f us: ratio %.2f%s\n", cl, pl, (pl > 0 ? cl / pl : 0), spread("ccl_pingpong_time_us 8", "perftest_send_lat_us 8", 1)
    printf "exchange 8 B: libccl sendrecv %.2f us (both ranks send at once)\n", m["ccl_sendrecv_time_us 8"]
    n = split(ar_sizes, sizes, " ")
    for (i = 1; i <= n; i++) {
      s = sizes[i]; cc = m["ccl_all_reduce_busbw_GBps " s]
      if (mpi_why != "") {
        printf "all_reduce %8d B: libccl busbw %.3f GB/s; Open MPI over UCX not run: %s\n", s, cc, mpi_why
        printf "  soft-RoCE over all rounds: libccl %s\n", retrans("ccl", s)
        continue
      }
      mu = m["mpi_ucx_all_reduce_busbw_GBps " s]
      printf "all_reduce %8d B: libccl busbw %.3f GB/s, Open MPI over UCX %.3f GB/s: ratio %.2f%s\n", s, cc, mu, (mu > 0 ? cc / mu : 0), spread("ccl_all_reduce_busbw_GBps " s, "mpi_ucx_all_reduce_busbw_GBps " s, 1)
      printf "  soft-RoCE over all rounds: libccl %s; UCX %s\n", retrans("ccl", s), retrans("ucx", s)
    }
  }' "$raw" | tee "$out/summary.txt"
