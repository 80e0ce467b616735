#!/bin/sh
# Builds libccl and runs its test suite: tools/run-tests.sh [BUILD_DIR] [CMAKE_ARGS...]
# e.g. tools/run-tests.sh build-asan -DCCL_SANITIZE=address
# CCL_CTEST_ARGS adds ctest arguments (e.g. -R REGEX to run a subset).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-build}
[ $# -gt 0 ] && shift
"$top/tools/install-deps.sh"
cmake -S "$top" -B "$dir" -DCCL_WERROR=ON "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)"
# shellcheck disable=SC2086 # CCL_CTEST_ARGS is a list of arguments
if ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" ${CCL_CTEST_ARGS:-}; then exit 0; fi
# A failed suite's output can run to thousands of lines, and logs are often
# read by their ends: the failed checks again, last, each with its test.
log="$dir/Testing/Temporary/LastTest.log"
if [ -f "$log" ]; then
  echo "== the failed checks (from $log):"
  grep -E '^[^ ]+\.(c|py):[0-9]+:[EF]:|^\[rank [0-9]+\] [^ ]+\.c:[0-9]+ |^FAILED |^E  ' "$log" | tail -n 40 || true
fi
exit 1
