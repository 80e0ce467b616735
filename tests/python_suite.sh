#!/bin/sh
# The Python suites: tests/python_suite.sh api|torch|torch2 LIBCCL CCLRUN
# BUILD_DIR. api and torch run on Debian's interpreter (its torch is 1.13),
# torch2 runs the torch suite on the python3 first on PATH, with the torch
# 2.x that tools/install-deps.sh installs there from PyPI. Exits 77 (ctest:
# skipped), saying why, when a module the suite needs is missing.
# torch-ext and torch2-ext only compile the backend for that suite (about
# 40 s each): ctest runs them beside other tests, before the suites, which
# run alone.
set -eu
suite=$1 lib=$2 cclrun=$3 build=$4
compile_only=
case $suite in
*-ext) suite=${suite%-ext} compile_only=1 ;;
esac
top=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
need="pytest numpy"
[ "$suite" = torch ] && need="pytest torch"
ext="$build/torch-ext"
if [ "$suite" = torch2 ]; then
  py=$(command -v python3 || echo /usr/bin/python3)
  need="pytest numpy torch"
  ext="$build/torch2-ext"
fi
for m in $need; do
  if ! $py -c "import $m" 2>/dev/null; then
    echo "SKIP python_$suite: $py cannot import $m (tools/install-deps.sh installs it)"
    exit 77
  fi
done
if [ "$suite" = torch2 ]; then
  v=$($py -c "import torch; print(torch.__version__)")
  case $v in
  1.*) echo "SKIP python_torch2: the python3 on PATH ($py) has torch $v, not 2.x (tools/install-deps.sh installs 2.x)"
       exit 77 ;;
  esac
  echo "python_torch2: $py, torch $v"
  suite=torch
fi
export CCL_LIBRARY="$lib" CCL_CCLRUN="$cclrun" PYTHONPATH="$top/python:$top/python/tests"
export CCL_TORCH_BUILD_DIR="$ext" PYTHONDONTWRITEBYTECODE=1 CCL_NCCL_DROP_IN="$build/nccl/drop-in/libnccl.so.2"
cd "$build"
if [ "$suite" = torch ]; then
  # Build the extension once, before the ranks start (each would wait on the build lock).
  start=$(date +%s)
  $py -c "import ccl.torch" 2>&1 | grep -v "No CUDA runtime" || true
  echo "python_torch: the extension is ready after $(($(date +%s) - start)) s"
  if [ -n "$compile_only" ]; then
    $py -c "import ccl.torch" >/dev/null 2>&1 || { echo "FAIL: import ccl.torch"; exit 1; }
    exit 0
  fi
  exec $py -m pytest -q -p no:cacheprovider "$top/python/tests/test_torch.py"
fi
exec $py -m pytest -q -p no:cacheprovider "$top/python/tests/test_ccl.py" "$top/python/tests/test_elastic.py" \
  "$top/python/tests/test_nccl_ctypes.py"
