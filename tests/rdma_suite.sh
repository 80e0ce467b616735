#!/bin/sh
# The RDMA suites, run inside tools/rdma-vm.sh's VM (two soft-RoCE devices,
# rxe0 and rxe1): tests/rdma_suite.sh BUILD_DIR. Simulated hosts alternate
# between the two devices (CCL_TEST_IB_HCAS), so traffic between hosts
# crosses from one adapter to the other.
set -eu
build=$1
export CCL_TEST_MATRIX=ib CCL_TEST_IB_HCAS=rxe0,rxe1
# The guest sees this machine's files read-only: no tuning file to keep.
export CCL_TUNING_FILE=none
ibv_devices
# A RoCE link delivers a queue pair's packets in order; the VM's veth pair
# does not, and soft-RoCE answers each gap with a NAK and a resend, which
# once failed a queue pair against a healthy peer. RPS steers each received
# flow to one vCPU and restores the order (docs/design.md, the ib retries:
# measured there, and why benchmarks keep the VM's default).
cpus=$(nproc)
for v in v0 v1; do
  printf '%x\n' $(((1 << cpus) - 1)) >"/sys/class/net/$v/queues/rx-0/rps_cpus"
  echo "rdma-suite: $v steers received flows to CPUs $(cat "/sys/class/net/$v/queues/rx-0/rps_cpus")"
done
fails=0
# Soft-RoCE's own counters, summed over both devices, so that a failure
# says whether the adapters saw packets out of order or went back and
# resent (the cable tests make them retry on purpose).
rxe_count() {
  cat /sys/class/infiniband/*/ports/*/hw_counters/"$1" 2>/dev/null | awk '{s += $1} END {print s + 0}'
}
rxe_counts() { echo "$(rxe_count out_of_seq_request) $(rxe_count completer_retry_err) $(rxe_count retry_exceeded_err)"; }
run() { # name, then the command
  name=$1
  shift
  start=$(date +%s)
  before=$(rxe_counts)
  if "$@"; then r=passed; else r=FAILED; fails=$((fails + 1)); fi
  took=$(($(date +%s) - start))
  set -- $before $(rxe_counts)
  echo "rdma-suite: $name $r in $took s (soft-RoCE: $(($4 - $1)) out of sequence, $(($5 - $2)) retries," \
    "$(($6 - $3)) queue pairs out of retries)"
}
# CCL_TEST_CABLE: the interface under rxe1, which test_transport_ib takes
# down (cable_pulled) or makes drop every packet (link_silent) once both
# ranks are in their loop, and restores after.
cable=v1
run test_transport_ib env CCL_TEST_CABLE="$cable" "$build/tests/test_transport_ib"
# Zero-copy reads cut in pieces of 12 KiB: many reads, the last of each
# transfer short.
run "test_transport_ib (zero_copy_exact, 12 KiB reads)" env CCL_IB_PULL_BYTES=12288 CK_RUN_CASE=zero_copy_exact \
  "$build/tests/test_transport_ib"
run "test_faults (kill -9)" env CK_RUN_CASE=kill_during_all_reduce "$build/tests/test_faults"
# A rank killed before its pairs' first use (CCL_CONNECT=lazy): the pair
# channel's refusal names it.
run "test_faults (killed before first use)" env CK_RUN_CASE=killed_before_first_use "$build/tests/test_faults"
run "test_faults_boot (wrong secret)" env CK_RUN_CASE=wrong_secret "$build/tests/test_faults_boot"
# The correctness matrix of every collective (its "matrix" loops only: the
# per-algorithm loops run shm and tcp, which the host's suite covers).
for tc in ${CCL_RDMA_SUITES:-test_coll_all_reduce:matrix test_coll_all_gather:matrix test_coll_reduce_scatter:matrix \
          test_coll_broadcast:matrix test_coll_reduce:matrix test_coll_exchange:all_to_all \
          test_coll_exchange:ring_send_recv test_coll_exchange:barrier test_coll_scatter:all_to_all_v}; do
  run "${tc%%:*} (${tc#*:})" env CK_RUN_CASE="${tc#*:}" "$build/tests/${tc%%:*}"
done
# ccl-trace flight and ccl-status on jobs over ib, every rank a host: a
# sleeper, another collective, a stopped and a killed rank named. The
# host's suite holds ccl-status to 2 s; here, under emulation, the
# interpreter alone takes 3 s and a stopped rank's second of silence takes 2,
# and the hang cases' timeout is 6 s, not 2, so that their good calls never
# time out.
run "test_flight (over ib)" env CCL_TEST_STATUS_TRANSPORT=ib CK_RUN_CASE=across_hosts \
  CCL_TEST_STATUS_BOUND_S=6 CCL_TEST_FLIGHT_TIMEOUT=6 \
  "$build/tests/test_flight"
# Elastic communicators over ib: a revoke's notice where links only close,
# kills noticed by the adapters' queue pairs, and grows that connect
# newcomers' queue pairs (an intruder refused). The agreement itself runs
# on the pair channel whatever the transport; its phases, and a stopped
# rank, are the host suite's (the whole of test_elastic passes here too, in
# 5.5 min: CCL_RDMA_ELASTIC=all).
for tc in ${CCL_RDMA_ELASTIC:-revoke_then_shrink shrink_after_kill grow_and_back}; do
  if [ "$tc" = all ]; then run "test_elastic (all)" "$build/tests/test_elastic"
  else run "test_elastic ($tc)" env CK_RUN_CASE="$tc" "$build/tests/test_elastic"; fi
done
exit "$fails"
