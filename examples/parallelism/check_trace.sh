#!/bin/sh
# The lessons seen through a trace (ctest, label examples):
#   check_trace.sh LIBCCL CCLRUN CCL_TRACE_TOOL
# runs data_parallel.py and tensor_parallel.py on 3 ranks with CCL_TRACE
# and the ring forced, and checks that `ccl-trace summary` counts the calls
# and bytes each program says it made: the gradient all-reduce once per
# step, each rank sending 2(N-1)/N of it, and tensor parallelism's two
# all-reduces per step. Exits 77 (skipped), saying why, without numpy.
set -eu
lib=$1 cclrun=$2 trace_tool=$3
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
steps=6
run() { # name, program, args...: its output in $dir/name.out, its trace in $dir/name.json
  name=$1 prog=$2
  shift 2
  CCL_TRACE="$dir/$name.json" CCL_ALGO=ring sh "$here/run_lesson.sh" "$lib" "$cclrun" 3 "$prog" \
    --steps $steps --log-every 100 "$@" > "$dir/$name.out" || { s=$?; cat "$dir/$name.out"; exit $s; }
  /usr/bin/python3 "$trace_tool" summary "$dir/$name.json" > "$dir/$name.sum"
  sed -n '/^By collective/,/^Calls/p' "$dir/$name.sum"
}
fail() { echo "FAILED: $*"; exit 1; }

run dp data_parallel.py
line=$(grep 'sends 2(N-1)/N of it per rank' "$dir/dp.out") || fail "data_parallel printed no formula line"
echo "$line"
buffer=$(echo "$line" | sed -n 's/.*all_reduce of \([0-9,]*\) B sends.*/\1/p')
sent=$(echo "$line" | sed -n 's/.*per rank: \([0-9,]*\) B.*/\1/p')
[ -n "$buffer" ] && [ -n "$sent" ] || fail "cannot read the formula line"
grep -Eq "^  all_reduce +ring +$buffer B x $steps +calls +sent +$sent B" "$dir/dp.sum" ||
  fail "the trace does not show $steps all-reduces of $buffer B with $sent B sent per rank"

run tp tensor_parallel.py
for b in $(sed -n 's/.*all_reduce [a-z]*: [0-9]* calls, [0-9,]* buffer bytes (1 per step, \([0-9,]*\) B per step)/\1/p' "$dir/tp.out"); do
  grep -Eq "^  all_reduce +ring +$b B x $steps +calls" "$dir/tp.sum" ||
    fail "the trace does not show tensor parallelism's $steps all-reduces of $b B"
  found=1
done
[ "${found:-0}" = 1 ] || fail "tensor_parallel printed no per-step all-reduce"
echo "the traces show the calls and bytes the lessons print"
