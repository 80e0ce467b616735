#!/bin/sh
# The Python suites with Debian's interpreter (PyTorch runs on it):
# tests/python_suite.sh api|torch LIBCCL CCLRUN BUILD_DIR. Exits 77 (ctest:
# skipped), saying why, when a module the suite needs is missing.
set -eu
suite=$1 lib=$2 cclrun=$3 build=$4
top=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
need="pytest numpy"
[ "$suite" = torch ] && need="pytest torch"
for m in $need; do
  if ! $py -c "import $m" 2>/dev/null; then
    echo "SKIP python_$suite: $py cannot import $m (tools/install-deps.sh installs it)"
    exit 77
  fi
done
export CCL_LIBRARY="$lib" CCL_CCLRUN="$cclrun" PYTHONPATH="$top/python:$top/python/tests"
export CCL_TORCH_BUILD_DIR="$build/torch-ext" PYTHONDONTWRITEBYTECODE=1
cd "$build"
if [ "$suite" = torch ]; then
  # Build the extension once, before the ranks start (each would wait on the build lock).
  start=$(date +%s)
  $py -c "import ccl.torch" 2>&1 | grep -v "No CUDA runtime" || true
  echo "python_torch: the extension is ready after $(($(date +%s) - start)) s"
  exec $py -m pytest -q -p no:cacheprovider "$top/python/tests/test_torch.py"
fi
exec $py -m pytest -q -p no:cacheprovider "$top/python/tests/test_ccl.py"
