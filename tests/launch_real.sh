#!/bin/sh
# Programs started by a real launcher, or by none, with no variable of
# libccl's own set:   launch_real.sh STYLE BUILD_DIR
#   none      the example trainer and the benchmark started by hand: each
#             runs as a communicator of one rank, and says so at INFO;
#   torchrun  torchrun (Debian's torch 1.13, through python/tests/torchrun.py,
#             or torch 2.x's) starts 3 ranks of the trainer and 2 of the
#             benchmark, as the README's recipe does: torchrun's store holds
#             MASTER_PORT, so the root must take another port by itself.
# Exit 77 (skipped) where torchrun cannot be run (no torch).
set -u
style=$1 build=$2
here=$(cd "$(dirname "$0")" && pwd)
trainer=$build/examples/train_linreg bench=$build/bench/all_reduce_perf
for v in $(env | sed -n 's/^\(CCL_[A-Z_]*\|RANK\|LOCAL_RANK\|WORLD_SIZE\|LOCAL_WORLD_SIZE\|MASTER_[A-Z]*\|TORCHELASTIC_[A-Z_]*\|SLURM_[A-Z_]*\|OMPI_COMM_WORLD_[A-Z]*\|PMI_[A-Z]*\)=.*/\1/p'); do
  unset "$v"
done
export CCL_TIMEOUT=60 CCL_TUNING_FILE=none
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The log's libccl and error lines first: under torchrun its own summary
# fills the tail and would hide why a rank stopped.
fail() {
  echo "FAIL: $*" >&2
  for f in "$out"/*; do
    echo "--- $f" >&2
    grep -E 'CCL (WARN|ERROR)|[Ee]rror|FAIL' "$f" | head -20 >&2
    echo "--- (its tail)" >&2
    tail -20 "$f" >&2
  done
  exit 1
}

case $style in
none)
  CCL_DEBUG=INFO CCL_DEBUG_SUBSYS=INIT "$trainer" --check --epochs 3 >"$out/trainer" 2>&1 || fail "the trainer alone"
  grep -q 'check: .*: ok' "$out/trainer" || fail "the trainer did not check its result"
  grep -q 'runs as a communicator of 1 rank' "$out/trainer" || fail "no INFO line says it runs as one rank"
  "$bench" -b 8 -e 1K >"$out/bench" 2>&1 || fail "the benchmark alone"
  grep -q '1 rank, 1 host' "$out/bench" || fail "the benchmark did not run as one rank"
  grep -q 'Out of bounds values : 0 OK' "$out/bench" || fail "the benchmark's results were wrong"
  # more ranks than CPUs: the header says so; one rank: it does not
  over=$(($(nproc) + 1))
  "$bench" --ranks "$over" -b 8 -e 8 -n 1 -w 0 >"$out/over" 2>&1 || fail "the benchmark on $over ranks"
  grep -q "^# oversubscribed: $over ranks on this machine share $(nproc) CPUs" "$out/over" ||
    fail "the header of $over ranks on $(nproc) CPUs does not say they are oversubscribed"
  grep -q "oversubscribed" "$out/bench" && fail "one rank's header says it is oversubscribed"
  echo "none: the trainer and the benchmark ran as one rank; $over ranks on $(nproc) CPUs were said to be oversubscribed"
  ;;
torchrun)
  # torch 2.x's torchrun where the first python3 has it, else Debian's torch
  # 1.13 through the fixed entry point (its own cannot start on Python 3.11)
  if python3 -c 'import torch, sys; sys.exit(int(torch.__version__.split(".")[0]) < 2)' 2>/dev/null; then
    run="python3 -m torch.distributed.run"
  elif /usr/bin/python3 -c 'import torch.distributed.run' 2>/dev/null; then
    run="/usr/bin/python3 $here/../python/tests/torchrun.py"
  else echo "SKIP: no torchrun (no torch)"; exit 77
  fi
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  # shellcheck disable=SC2086 # $run is a command and its arguments
  timeout 120 $run --nproc_per_node 3 --master_port "$port" --no_python "$trainer" --check --epochs 5 \
    >"$out/trainer" 2>&1 || fail "torchrun $trainer"
  [ "$(grep -c 'check: .*: ok' "$out/trainer")" -ge 1 ] || fail "the trainer did not check its result"
  # shellcheck disable=SC2086
  timeout 120 $run --standalone --nproc_per_node 2 --no_python "$bench" -b 8 -e 64K \
    >"$out/bench" 2>&1 || fail "torchrun --standalone $bench"
  grep -q '2 ranks, 1 host' "$out/bench" || fail "the benchmark did not run on 2 ranks"
  grep -q 'Out of bounds values : 0 OK' "$out/bench" || fail "the benchmark's results were wrong"
  echo "torchrun ($run): the trainer on 3 ranks and the benchmark on 2 started with no CCL_ variable"
  ;;
*) echo "unknown style $style" >&2; exit 2 ;;
esac
