#!/bin/sh
# The Python package installed the ways users install it, each checked by
# running it, never from this checkout:   python_install.sh SOURCE BUILD
#  1. pip wheel ./python (PyPI's scikit-build-core builds libccl into the
#     wheel) with the python3 first on PATH; the wheel into a venv: import
#     ccl loads the wheel's own libccl, and 3 ranks under cclrun all-reduce.
#  2. pip install --target with Debian's /usr/bin/python3 (torch 1.13):
#     import ccl.torch compiles its backend against the wheel's libccl,
#     saying so on stderr, and cclrun -n 2 runs a torch program that calls
#     init_process_group("ccl") with no variable of its own.
#  3. libccl found through LD_LIBRARY_PATH (an installed prefix): import
#     ccl.torch links its backend against that very file.
# Exit 77 (skipped, saying why) where PyPI cannot be reached.
set -u
src=$1 build=$2
cclrun=$build/tools/cclrun
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$tmp/log" ] && tail -40 "$tmp/log" >&2; exit 1; }
step() { echo "== $*"; }
unset CCL_LIBRARY PYTHONPATH LD_LIBRARY_PATH CCL_TORCH_BUILD_DIR
export CCL_TUNING_FILE=none CCL_TIMEOUT=60 PYTHONDONTWRITEBYTECODE=1 PIP_DISABLE_PIP_VERSION_CHECK=1
cd "$tmp" || exit 1

step "pip wheel ./python"
if ! python3 -m pip download --no-deps -q -d "$tmp/probe" scikit-build-core >"$tmp/log" 2>&1; then
  echo "SKIP: PyPI cannot be reached (pip download scikit-build-core failed): $(tail -1 "$tmp/log")"
  exit 77
fi
start=$(date +%s)
python3 -m pip wheel -q "$src/python" -w "$tmp/wheels" >"$tmp/log" 2>&1 || fail "pip wheel ./python"
echo "built in $(($(date +%s) - start)) s: $(ls "$tmp/wheels")"
whl=$(ls "$tmp/wheels"/ccl-*.whl)
python3 -m zipfile -l "$whl" | grep -q 'ccl/libccl.so.0' || fail "the wheel holds no libccl.so.0"

step "the wheel in a venv"
python3 -m venv "$tmp/venv" >"$tmp/log" 2>&1 || fail "python3 -m venv"
"$tmp/venv/bin/python" -m pip install -q --no-index "$whl" >"$tmp/log" 2>&1 || fail "pip install the wheel"
"$tmp/venv/bin/python" -c 'import ccl, ccl._lib as l; print(l.path)' >"$tmp/log" 2>&1 || fail "import ccl"
grep -q "^$tmp/venv/.*/ccl/libccl.so.0$" "$tmp/log" || fail "import ccl did not load the wheel's libccl: $(cat "$tmp/log")"
cat >"$tmp/sum.py" <<'PY'
import array, ccl
c = ccl.Comm.from_env()
x = array.array("q", [c.rank + 1])
c.all_reduce(x)
print("rank", c.rank, "sum", x[0], "ok" if x[0] == c.size * (c.size + 1) // 2 else "WRONG")
c.destroy()
PY
"$cclrun" -n 3 "$tmp/venv/bin/python" "$tmp/sum.py" >"$tmp/log" 2>&1 || fail "3 ranks of the venv's ccl"
[ "$(grep -c ' ok$' "$tmp/log")" -eq 3 ] || fail "3 ranks of the venv's ccl: a wrong sum"

if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "install routes: the wheel works; torch steps skipped: /usr/bin/python3 has no torch"
  exit 0
fi
cat >"$tmp/ddp.py" <<'PY'
import ccl.torch, torch, torch.distributed as dist
dist.init_process_group("ccl")
t = torch.full((4,), float(dist.get_rank() + 1))
dist.all_reduce(t)
n = dist.get_world_size()
print("rank", dist.get_rank(), "ok" if t.tolist() == [n * (n + 1) / 2] * 4 else "WRONG %s" % t.tolist())
dist.destroy_process_group()
PY

step "pip install --target with /usr/bin/python3, then import ccl.torch"
/usr/bin/python3 -m pip install -q --target "$tmp/site" "$src/python" >"$tmp/log" 2>&1 || fail "pip install --target"
export CCL_TORCH_BUILD_DIR="$tmp/ext-wheel"
PYTHONPATH=$tmp/site /usr/bin/python3 -c 'import ccl.torch' >"$tmp/log" 2>&1 || fail "import ccl.torch from --target"
grep -q "^ccl.torch: compiling the torch backend .*$tmp/site/ccl/libccl.so.0" "$tmp/log" ||
  fail "no line said the backend was being compiled against the package's libccl"
grep -q "^ccl.torch: compiled in" "$tmp/log" || fail "no line said the compile ended"
PYTHONPATH=$tmp/site /usr/bin/python3 -c 'import ccl.torch' >"$tmp/log" 2>&1 || fail "import ccl.torch again"
grep -q "compiling" "$tmp/log" && fail "the cached backend was compiled again"
PYTHONPATH=$tmp/site "$cclrun" -n 2 /usr/bin/python3 "$tmp/ddp.py" >"$tmp/log" 2>&1 || fail "cclrun -n 2 a torch program"
[ "$(grep -c ' ok$' "$tmp/log")" -eq 2 ] || fail "cclrun -n 2 a torch program: a wrong sum"

step "libccl through LD_LIBRARY_PATH, the package without one"
mkdir -p "$tmp/pkg" "$tmp/lib"
cp -r "$src/python/ccl" "$tmp/pkg/" && rm -rf "$tmp/pkg/ccl/__pycache__"
mkdir -p "$tmp/pkg/ccl/include" && cp "$src/include/ccl.h" "$tmp/pkg/ccl/include/"
cp "$tmp/site/ccl/libccl.so.0" "$tmp/lib/"
export CCL_TORCH_BUILD_DIR="$tmp/ext-ldpath"
# the package's own candidates (its folder, a build tree beside it) find nothing here
PYTHONPATH=$tmp/pkg LD_LIBRARY_PATH=$tmp/lib /usr/bin/python3 -c 'import ccl.torch, ccl._lib as l; print("path", l.path)' \
  >"$tmp/log" 2>&1 || fail "import ccl.torch with libccl on LD_LIBRARY_PATH"
grep -q "^path $tmp/lib/libccl.so.0$" "$tmp/log" || fail "ccl did not report the real path of libccl"
PYTHONPATH=$tmp/pkg LD_LIBRARY_PATH=$tmp/lib "$cclrun" -n 2 /usr/bin/python3 "$tmp/ddp.py" >"$tmp/log" 2>&1 ||
  fail "cclrun -n 2 with libccl on LD_LIBRARY_PATH"
[ "$(grep -c ' ok$' "$tmp/log")" -eq 2 ] || fail "a wrong sum with libccl on LD_LIBRARY_PATH"
echo "install routes: pip wheel into a venv, pip --target with torch, and LD_LIBRARY_PATH all imported and ran"
