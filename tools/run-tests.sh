#!/bin/sh
# Builds libccl and runs its test suite: tools/run-tests.sh [BUILD_DIR] [CMAKE_ARGS...]
# e.g. tools/run-tests.sh build-asan -DCCL_SANITIZE=address
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-build}
[ $# -gt 0 ] && shift
"$top/tools/install-deps.sh"
cmake -S "$top" -B "$dir" -DCCL_WERROR=ON "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)"
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)"
