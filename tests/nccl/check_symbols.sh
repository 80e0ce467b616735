#!/bin/sh
# tests/nccl/check_symbols.sh NCCL_H LIBRARY: every function NVIDIA's
# nccl.h declares (each nccl* call and its pnccl* twin) is a defined
# dynamic symbol of LIBRARY, so that a program built against that header
# never dies at load or at a call for a missing symbol. Exits 77 (ctest:
# skipped), saying why, where the machine has no such header.
set -eu
h=$1 lib=$2
if [ ! -r "$h" ]; then
  echo "SKIP: no NVIDIA nccl.h on this machine (looked for it under the CUDA toolkit: $h)"
  exit 77
fi
version=$(sed -n 's/^#define NCCL_\(MAJOR\|MINOR\|PATCH\) *\([0-9][0-9]*\).*/\2/p' "$h" | paste -sd. -)
want=$(grep -oE '^[A-Za-z_][A-Za-z0-9_ *]*[ *]p?nccl[A-Za-z0-9]+\(' "$h" | grep -oE 'p?nccl[A-Za-z0-9]+\($' | tr -d '(' | sort -u)
have=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)
n=$(printf '%s\n' "$want" | grep -c .)
if [ "$n" -lt 20 ]; then
  echo "FAIL: found only $n declarations in $h: the pattern no longer reads it"
  exit 1
fi
missing=$(printf '%s\n' "$want" | while read -r f; do printf '%s\n' "$have" | grep -qx "$f" || echo "$f"; done)
if [ -n "$missing" ]; then
  echo "FAIL: $lib lacks $(printf '%s\n' "$missing" | grep -c .) of the $n functions $h (NCCL $version) declares:"
  printf '  %s\n' $missing
  exit 1
fi
echo "nccl_symbols: all $n functions of $h (NCCL $version) are defined in $lib"
