#!/bin/sh
# The RDMA suites, run inside tools/rdma-vm.sh's VM (two soft-RoCE devices,
# rxe0 and rxe1): tests/rdma_suite.sh BUILD_DIR. Simulated hosts alternate
# between the two devices (CCL_TEST_IB_HCAS), so traffic between hosts
# crosses from one adapter to the other.
set -eu
build=$1
export CCL_TEST_MATRIX=ib CCL_TEST_IB_HCAS=rxe0,rxe1
ibv_devices
fails=0
for t in ${CCL_RDMA_SUITES:-test_coll_all_reduce test_coll_all_gather test_coll_reduce_scatter test_coll_broadcast test_coll_reduce test_coll_exchange}; do
  start=$(date +%s)
  if "$build/tests/$t"; then r=passed; else r=FAILED; fails=$((fails + 1)); fi
  echo "rdma-suite: $t $r in $(($(date +%s) - start)) s"
done
exit "$fails"
