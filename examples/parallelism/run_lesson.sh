#!/bin/sh
# Runs one parallelism lesson for ctest (label examples):
#   run_lesson.sh LIBCCL CCLRUN NRANKS PROGRAM.py [args...]
# with Debian's /usr/bin/python3 (numpy's home) against this build's libccl.
# The program checks its final weights against one process and exits
# non-zero when they differ; this adds that its closing "check:" line says
# they match (check_*.py programs, which test the check itself, are judged
# by their exit status alone). Exits 77 (ctest: skipped), saying why, without numpy.
set -eu
lib=$1 cclrun=$2 n=$3 prog=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
py=/usr/bin/python3
if ! $py -c "import numpy" 2>/dev/null; then
  echo "SKIP: $py cannot import numpy (tools/install-deps.sh installs python3-numpy)"
  exit 77
fi
export CCL_LIBRARY="$lib" PYTHONPATH="$here/../../python:$here" PYTHONDONTWRITEBYTECODE=1
# One BLAS thread per rank: the ranks already fill the cores.
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# LESSON_CCLRUN_FLAGS: cclrun options of the lesson's own (--elastic, --host-per-rank).
# shellcheck disable=SC2086
out=$("$cclrun" -n "$n" --timeout 240 ${LESSON_CCLRUN_FLAGS:-} "$py" "$here/$prog" "$@" 2>&1) || { echo "$out"; echo "FAILED: exit status $?"; exit 1; }
echo "$out"
case $prog in check_*) exit 0 ;; esac # a test of the check itself: its exit status says it all
echo "$out" | grep -q '^\[0\] check: .*match the one-process run' || { echo "FAILED: no matching check line"; exit 1; }
if echo "$out" | grep -q 'DIFFER FROM\|: NO$'; then echo "FAILED: a check says no"; exit 1; fi
