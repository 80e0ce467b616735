#!/bin/sh
# Every documented way to use an installed libccl, from a prefix of its own:
#   install_routes.sh SOURCE_DIR BUILD_DIR [SANITIZER]
# cmake --install BUILD --prefix P, then programs built and run against P
# with pkg-config (shared, and --static against a prefix holding only
# libccl.a), with CMake's find_package (ccl::ccl, ccl::ccl_static,
# ccl::ccl-nccl), and a program written against NCCL linked with nothing
# but -lccl-nccl (and through pkg-config ccl-nccl). Each runs its ranks
# under the installed cclrun (or forks them) and checks an all-reduce.
set -u
src=$1 build=$2
if [ -n "${3:-}" ]; then
  echo "SKIP: a $3-sanitized libccl needs its sanitizer's runtime loaded first, which programs built as users build theirs do not have"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
P=$tmp/prefix
fail() { echo "FAIL: $*" >&2; [ -f "$tmp/log" ] && tail -30 "$tmp/log" >&2; exit 1; }
step() { echo "== $*"; }
unset LD_LIBRARY_PATH CCL_RANK CCL_WORLD_SIZE CCL_ROOT_ADDR RANK WORLD_SIZE MASTER_ADDR MASTER_PORT
export CCL_TUNING_FILE=none CCL_TIMEOUT=60

step "cmake --install to $P"
cmake --install "$build" --prefix "$P" >"$tmp/log" 2>&1 || fail "cmake --install"
grep -q "LD_LIBRARY_PATH=$P/lib" "$tmp/log" || fail "the install does not say how programs find a prefix's library"
lib=$P/lib
[ -d "$lib" ] || lib=$(dirname "$(find "$P" -name 'libccl.so.0' | head -n 1)")
cclrun=$P/bin/cclrun
[ -x "$cclrun" ] || fail "no installed cclrun"
ranks() { "$cclrun" -n 3 "$@" >"$tmp/log" 2>&1 && [ "$(grep -c ': ok$' "$tmp/log")" -eq 3 ]; }
cc=${CC:-cc}

step "pkg-config ccl (shared), run with LD_LIBRARY_PATH"
export PKG_CONFIG_PATH=$lib/pkgconfig
# shellcheck disable=SC2046 # pkg-config's words
$cc "$src/tests/install/consumer.c" $(pkg-config --cflags --libs ccl) -o "$tmp/pc_shared" 2>"$tmp/log" ||
  fail "cc with pkg-config ccl"
LD_LIBRARY_PATH=$lib ranks "$tmp/pc_shared" || fail "the pkg-config program"

step "pkg-config --static ccl, against a prefix with libccl.a alone"
cp -a "$P" "$tmp/static" && rm -f "$tmp/static"/lib*/libccl.so* "$tmp/static"/lib*/libccl-nccl.so*
# shellcheck disable=SC2046
PKG_CONFIG_PATH=$(dirname "$(find "$tmp/static" -name ccl.pc)") \
  $cc "$src/tests/install/consumer.c" $(PKG_CONFIG_PATH=$(dirname "$(find "$tmp/static" -name ccl.pc)") pkg-config --static --cflags --libs ccl) \
  -o "$tmp/pc_static" >"$tmp/log" 2>&1 || fail "cc with pkg-config --static ccl"
ldd "$tmp/pc_static" | grep -q libccl && fail "the static program still loads libccl.so"
ranks "$tmp/pc_static" || fail "the statically linked program"

step "find_package(ccl): ccl::ccl and ccl::ccl-nccl, then ccl::ccl_static"
cmake -S "$src/tests/install" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$P" >"$tmp/log" 2>&1 || fail "configure (shared)"
cmake --build "$tmp/cm" >"$tmp/log" 2>&1 || fail "build (shared)"
ranks "$tmp/cm/consumer" || fail "the CMake program (ccl::ccl)"
"$tmp/cm/nccl_consumer" >"$tmp/log" 2>&1 || fail "the CMake NCCL program (ccl::ccl-nccl)"
cmake -S "$src/tests/install" -B "$tmp/cms" -DCMAKE_PREFIX_PATH="$P" -DCCL_STATIC=ON >"$tmp/log" 2>&1 ||
  fail "configure (ccl::ccl_static)"
cmake --build "$tmp/cms" >"$tmp/log" 2>&1 || fail "build (ccl::ccl_static)"
ldd "$tmp/cms/consumer" | grep -q libccl && fail "the ccl::ccl_static program loads libccl.so"
ranks "$tmp/cms/consumer" || fail "the CMake program (ccl::ccl_static)"

step "an NCCL program linked with -lccl-nccl alone, and through pkg-config ccl-nccl"
$cc "$src/tests/install/nccl_consumer.c" -I"$P/include/ccl-nccl" -L"$lib" -lccl-nccl -Wl,-rpath,"$lib" \
  -o "$tmp/nccl_plain" >"$tmp/log" 2>&1 || fail "cc ... -lccl-nccl"
"$tmp/nccl_plain" >"$tmp/log" 2>&1 || fail "the -lccl-nccl program (libccl.so.0 must be found beside libccl-nccl)"
# shellcheck disable=SC2046
$cc "$src/tests/install/nccl_consumer.c" $(pkg-config --cflags --libs ccl-nccl) -o "$tmp/nccl_pc" >"$tmp/log" 2>&1 ||
  fail "cc with pkg-config ccl-nccl"
LD_LIBRARY_PATH=$lib "$tmp/nccl_pc" >"$tmp/log" 2>&1 || fail "the pkg-config ccl-nccl program"
echo "install routes: pkg-config (shared, static), CMake (ccl::ccl, ccl::ccl_static, ccl::ccl-nccl) and -lccl-nccl all built and ran"
