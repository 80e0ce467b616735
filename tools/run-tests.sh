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
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" ${CCL_CTEST_ARGS:-}
