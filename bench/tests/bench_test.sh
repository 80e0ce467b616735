#!/bin/sh
# The benchmark programs' tests (ctest label "bench"), one case per call:
#   bench_test.sh CASE BIN_DIR PROG [ARGS...]
# Every case checks exact exit statuses and what the output says, so a
# program that fails for another reason than the one tested fails the test.
set -u
case_name=$1 bin=$2 prog=$3
shift 3
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# The short sweep every program must pass.
short="-b 8 -e 256K -f 4 -n 3 -w 1"

die() { echo "FAIL: $*"; exit 1; }

# run OUT_FILE COMMAND...: runs it, keeps stdout and stderr, sets $rc.
run() {
  out=$1; shift
  echo "+ $*"
  "$@" >"$out" 2>"$out.err"
  rc=$?
  cat "$out" "$out.err"
}

# The data rows of a text table (with cclrun's "[0] " prefix removed).
rows() { sed 's/^\[0\] //' "$1" | grep -v '^#' | grep -v '^\[' ; }

# Every measured placement was checked and found right; at least one row.
expect_all_right() {
  rows "$1" | awk -v f="$1" '
    { n++; if ($9 != "0" || ($13 != "0" && $13 != "N/A")) { print "wrong values in " f ": " $0; bad = 1 } }
    END { if (n == 0) { print "no result rows in " f; bad = 1 } exit bad }' || exit 1
  grep -q '# Out of bounds values : 0 OK$' "$1" || die "no '0 OK' footer"
}

# The header names the rank count, and the transport where there are peers.
expect_header() { # FILE NRANKS TRANSPORT
  plural=s; [ "$2" -eq 1 ] && plural=
  t=$3; [ "$2" -eq 1 ] && t=none
  grep -q "^\(\[0\] \)\?# $prog: .*, $2 rank$plural, .*transport $t, " "$1" || die "header does not say $2 ranks over $t"
}

# LAUNCHER... -- ARGS... -> $launcher and $args (words without spaces).
split_launcher() {
  launcher= args=
  while [ $# -gt 0 ] && [ "$1" != -- ]; do launcher="$launcher $1"; shift; done
  [ $# -gt 0 ] && shift
  args="$*"
}

case $case_name in
sweep) # TRANSPORT: 1 to 4 ranks forked by --ranks
  for n in 1 2 3 4; do
    run "$tmp/out" "$bin/$prog" $short --ranks "$n" --transport "$1"
    [ $rc -eq 0 ] || die "exit status $rc with $n ranks"
    expect_header "$tmp/out" "$n" "$1"
    if [ "$prog" = barrier_perf ]; then
      grep -q '# Out of bounds values : N/A' "$tmp/out" || die "barrier footer"
      [ "$(rows "$tmp/out" | wc -l)" -eq 1 ] || die "barrier: one row expected"
    elif [ "$prog" = hypercube_perf ] && [ "$n" -eq 3 ]; then
      grep -q '^# skipped float32: a hypercube needs a power-of-2 rank count' "$tmp/out" || die "3 ranks: no skip line"
      [ "$(rows "$tmp/out" | wc -l)" -eq 0 ] || die "hypercube on 3 ranks: rows"
    else
      expect_all_right "$tmp/out"
    fi
  done ;;
cclrun) # CCLRUN N [CCLRUN_OPTIONS...]: started by cclrun, through ccl_comm_init_env
  cclrun=$1 n=$2; shift 2
  run "$tmp/out" "$cclrun" -n "$n" --timeout 100 "$@" "$bin/$prog" $short
  [ $rc -eq 0 ] || die "exit status $rc"
  transport=shm
  case " $* " in *" --host-per-rank "*) transport=tcp; grep -q "^\[0\] # $prog: .*, $n hosts," "$tmp/out" || die "hosts" ;; esac
  expect_header "$tmp/out" "$n" "$transport"
  [ "$(grep -c -v '^\[0\]' "$tmp/out")" -eq 0 ] || die "only rank 0 prints"
  expect_all_right "$tmp/out" ;;
types) # N [ARGS...]: every type, op and root on a tiny sweep
  n=$1; shift
  run "$tmp/out" "$bin/$prog" -b 1 -e 4K -f 8 -n 2 -w 1 -d all -o all -r all --ranks "$n" "$@"
  [ $rc -eq 0 ] || die "exit status $rc"
  expect_all_right "$tmp/out"
  for t in int8 uint8 int32 uint32 int64 uint64 float16 bfloat16 float32 float64; do
    rows "$tmp/out" | awk -v t=$t '$3 == t { found = 1 } END { exit !found }' || die "no $t rows"
  done ;;
corrupt) # LAUNCHER... -- ARGS...: the checker's self-test must make the program report wrong values and exit 1
  split_launcher "$@"
  # No tuning file: benchmarks running beside this one can make its check
  # of the file's figures find them stale, a warning that is not a failure.
  CCL_TUNING_FILE=none CCL_BENCH_CORRUPT=1 run "$tmp/out" $launcher "$bin/$prog" -b 64 -e 4K -f 4 -n 2 -w 1 -r 1 $args
  [ $rc -eq 1 ] || die "exit status $rc, not 1"
  # Exactly one flipped element per checked call: no more, no fewer.
  rows "$tmp/out" | awk '{ n++; if ($9 != "1" || ($13 != "1" && $13 != "N/A")) { print "not one wrong: " $0; bad = 1 } }
    END { exit bad || n == 0 }' || die "#wrong is not 1 in every row"
  grep -Eq '# Out of bounds values : [1-9][0-9]* FAILED$' "$tmp/out" || die "no FAILED footer"
  grep -Eq '\[rank [0-9]+\] |CCL WARN' "$tmp/out.err" && die "the program failed for another reason"
  exit 0 ;;
device) # N: --device, GPU buffers checked bit for bit against the GPU's own copy; skipped (77) without a GPU
  run "$tmp/out" "$bin/$prog" --ranks "$1" --device $short -d all -o all
  if [ $rc -eq 3 ] && grep -q -e "--device needs the CUDA driver" -e "--device: no GPU" "$tmp/out.err"; then
    echo "SKIP: --device needs a GPU and its driver"
    exit 77
  fi
  [ $rc -eq 0 ] || die "exit status $rc"
  grep -q "^# buffers: GPU memory" "$tmp/out" || die "the header does not say the buffers are on the GPU"
  grep -q "^# memcpy: [0-9.]* GB/s device to device on " "$tmp/out" || die "the roofline is not the GPU's copy"
  expect_all_right "$tmp/out"
  CCL_BENCH_CORRUPT=1 run "$tmp/out" "$bin/$prog" --ranks "$1" --device -b 64 -e 4K -f 4 -n 2 -w 1
  [ $rc -eq 1 ] || die "the checker's self-test on GPU buffers: exit status $rc, not 1"
  exit 0 ;;
steady) # N: --steady's guard, driven by its self-test (CCL_BENCH_SLOW_PROBE)
  n=$1
  CCL_BENCH_SLOW_PROBE=before run "$tmp/out" "$bin/$prog" -b 1K -e 4K -f 4 -n 3 -w 1 --ranks "$n" --steady
  [ $rc -eq 0 ] || die "exit status $rc"
  expect_all_right "$tmp/out"
  # At least: the machine itself may be slow for a while too.
  waited='^# Steady *: [0-9]* blocks timed again, [1-9][0-9]* s waited, [0-9]* kept slow, [0-9]* waits ended slow'
  grep -q "$waited (fastest probe [0-9.]* us, factor 1.50)\$" "$tmp/out" || die "a slow probe before a block must make the run wait"
  grep -q -- '--steady: the machine is slow' "$tmp/out.err" || die "the wait is not announced"
  # A machine that stays slow: the first wait ends at its limit, and its
  # last probe is the speed to expect from then on. Waiting before every
  # try of both blocks instead, as --steady did before, waits 2 s x 10
  # tries x 2 blocks; the machine's own spells may add a few waits.
  CCL_BENCH_SLOW_PROBE=every CCL_BENCH_STEADY_WAIT_S=2 run "$tmp/out" "$bin/$prog" -b 1K -e 4K -f 4 -n 3 -w 1 \
    --ranks "$n" --steady
  [ $rc -eq 0 ] || die "exit status $rc"
  expect_all_right "$tmp/out"
  grep -q -- '--steady: still slow after 2 s (probe [0-9]* us, fastest [0-9]* us): timing at this speed from now on' \
    "$tmp/out.err" || die "a wait that ends slow is not announced"
  steady=$(grep '^# Steady' "$tmp/out")
  echo "$steady" | awk '$10 == "waited," && $8 >= 2 && $8 < 20 && $15 == "waits" && $14 >= 1 { ok = 1 } END { exit !ok }' ||
    die "a machine that stays slow must be waited for once, not before every block: $steady"
  CCL_BENCH_SLOW_PROBE=after run "$tmp/out" "$bin/$prog" -b 1K -e 4K -f 4 -n 3 -w 1 --ranks "$n" --steady=3 -A auto,ring \
    --rounds 2
  [ $rc -eq 0 ] || die "exit status $rc"
  expect_all_right "$tmp/out"
  grep -q '^# Steady *: [1-9][0-9]* blocks timed again, .*, factor 3.00)$' "$tmp/out" ||
    die "a slow probe after a block must time it again"
  [ "$(rows "$tmp/out" | wc -l)" -eq 4 ] || die "two sizes x two algorithms: four rows"
  run "$tmp/out" "$bin/$prog" -b 1K -e 4K -f 4 -n 3 -w 1 --ranks "$n"
  grep -q '^# Steady' "$tmp/out" && die "no steady line without --steady"
  run "$tmp/out" "$bin/$prog" --steady=1
  [ $rc -eq 2 ] || die "--steady=1: exit status $rc, not 2"
  grep -q 'factor must be a number from 1.05 to 100' "$tmp/out.err" || die "--steady=1 not explained"
  exit 0 ;;
files) # LAUNCHER... -- ARGS...: JSON and CSV parse and agree with the text
  split_launcher "$@"
  run "$tmp/out" $launcher "$bin/$prog" --json "$tmp/r.json" --csv "$tmp/r.csv" $args
  [ $rc -eq 0 ] || die "exit status $rc"
  python3 "$here/check_results.py" "$tmp/out" "$tmp/r.csv" "$tmp/r.json" || die "results disagree" ;;
algos) # N ALGO,ALGO,...: every algorithm measured in turn in one run, on one communicator that ccl_comm_set_algo switches
  n=$1 list=$2
  CCL_DEBUG=INFO CCL_DEBUG_SUBSYS=COLL run "$tmp/out" "$bin/$prog" -b 8 -e 64K -f 8 -n 3 -w 1 --rounds 3 --ranks "$n" -A "$list"
  [ $rc -eq 0 ] || die "exit status $rc"
  expect_all_right "$tmp/out"
  grep -q "^# $prog: .*, algo $list\$" "$tmp/out" || die "the header does not list $list"
  # one row per algorithm and size, in the order given
  want=$(for s in 8 64 512 4096 32768; do echo "$list" | tr , '\n' | sed "s/^/$s /"; done)
  got=$(rows "$tmp/out" | awk '{ a = $NF; sub(/:.*/, "", a); print $1, a }')
  [ "$got" = "$want" ] || die "rows are not one per algorithm and size: $got"
  for a in $(echo "$list" | tr , ' '); do
    [ "$a" = auto ] && pat="all_reduce #.*: [a-z]* (cheapest" || pat="all_reduce #.*: $a (ccl_comm_set_algo)"
    grep -q "$pat" "$tmp/out.err" || die "no call ran $a"
  done
  # each auto row names what the planner ran, an algorithm rank 0's log shows it choosing
  for ran in $(rows "$tmp/out" | awk '$NF ~ /^auto/ { print $NF }'); do
    case $ran in auto:[a-z]*) ;; *) die "an auto row does not say what ran: $ran" ;; esac
    grep -q "^[^ ]*:0 .*all_reduce #.*: ${ran#auto:} (cheapest" "$tmp/out.err" || die "$ran: rank 0 never chose ${ran#auto:}"
  done ;;
warm) # N: before the sweep, each algorithm's communicator runs the largest call until 8 MiB have passed (64 calls at most)
  n=$1
  CCL_DEBUG=TRACE CCL_DEBUG_SUBSYS=PLAN run "$tmp/out" "$bin/$prog" -b 32K -e 32K -n 1 -w 0 -c 0 --ranks "$n" -A ring,direct
  [ $rc -eq 0 ] || die "exit status $rc"
  # Rank 0's 32 KiB all-reduces (8192 floats), each logged with the
  # algorithm that ran it: first 64 with ring and 64 with direct, before
  # the sweep's timed calls, which take turns between the two.
  got=$(grep "^[^ ]*:0 \[.*TRACE PLAN: all_reduce #[0-9]*: 8192 x float32: " "$tmp/out.err" |
        sed 's/.*8192 x float32: \([a-z]*\) predicted.*/\1/' | uniq -c | head -3 | awk '{ printf "%s %s, ", $1, $2 }')
  case $got in
  "64 ring, 64 direct, "[0-9]*" ring, ") ;;
  *) die "rank 0's first 32 KiB all-reduces: $got want 64 ring, 64 direct, then the sweep's" ;;
  esac ;;
fresh) # N [ARGS...]: --fresh writes every timed iteration's inputs first (each type, both placements), times each alone (-I's columns), and the results stay right
  n=$1; shift
  run "$tmp/out" "$bin/$prog" -b 1 -e 64K -f 16 -n 3 -w 1 -d all --fresh --ranks "$n" "$@"
  [ $rc -eq 0 ] || die "exit status $rc"
  grep -q '^#  *size .* min  *median  *p99  *max' "$tmp/out" || die "--fresh did not time each iteration alone (no -I columns)"
  expect_all_right "$tmp/out" ;;
usage) # bad flags: a message naming the program, status 2; -h: status 0
  for bad in "-b" "-b x" "-e 1Q" "-f 1" "-n 0" "-w -1" "-m 0" "-c 2" "-z 7" "-a 4" "-d float8" "-o mean" \
             "-r x" "-t udp" "-t 2" "-g 2" "--transport udp" "-A spiral" "-A ring,spiral" "-A ring,ring" "-A ring,tree -I" "-A ring,tree --fresh" "--fresh 1" "--rounds 0" "--ranks 0" "--device x" "--bogus" "-b 1M -e 1K" "-f 2 -i 8" "extra" "--host-per-rank"; do
    run "$tmp/out" "$bin/$prog" $bad
    [ $rc -eq 2 ] || die "'$bad': exit status $rc, not 2"
    grep -q "^$prog: " "$tmp/out.err" || die "'$bad': no message"
  done
  run "$tmp/out" "$bin/$prog" -t shm
  [ $rc -eq 2 ] && grep -q "threads per process; to choose the transport, --transport shm" "$tmp/out.err" ||
    die "-t shm must say that -t is nccl-tests' threads per process"
  run "$tmp/out" "$bin/$prog" -r 5 --ranks 2 $short
  [ $rc -eq 2 ] && grep -q 'only 2 ranks' "$tmp/out.err" || die "-r 5 with 2 ranks: status $rc"
  run "$tmp/out" "$bin/$prog" -h
  [ $rc -eq 0 ] && grep -q "^Usage: $prog " "$tmp/out" && grep -q CCL_BENCH_CORRUPT "$tmp/out" || die "-h" ;;
nccltests) # nccl-tests 2.19's flags, spelt as there: each taken and doing what its help says
  run "$tmp/out" "$bin/$prog" --ranks 3 -b 8 -e 64K -f 8 -n 5 -I 1 -K 2 -R 1 -T 30 -C 1 -S 1 -M 1 -u 3 \
    -y 0 -p 1 -x 1 -V 16 -G 0 -D 0 -J "$tmp/r.json"
  [ $rc -eq 0 ] || die "exit status $rc"
  expect_all_right "$tmp/out"
  for said in "CPU time of the process (-C 1)" "the first 2 left out (-K)" "3 elements past a page (-u)" \
              "buffers registered (-R 1)" "per iteration (us)" "warmup iters: 1 " "average over ranks"; do
    grep -qF "$said" "$tmp/out" || die "the header does not say '$said'"
  done
  rows "$tmp/out" | awk '$NF !~ /^[0-9][0-9]:[0-9][0-9]:[0-9][0-9]$/ { print "no -S timestamp: " $0; bad = 1 }
    END { exit bad }' || exit 1
  grep -q '^# Memory  *: buffers .* per rank (send and receive), rank 0.s peak resident set ' "$tmp/out" || die "-M"
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); assert d["rows"], "no rows"' "$tmp/r.json" ||
    die "-J did not write JSON with results"
  run "$tmp/out" "$bin/$prog" --ranks 3 -b 8 -e 64K -f 8 -n 3 -R 2 -I 0
  [ $rc -eq 0 ] || die "-R 2: exit status $rc"
  expect_all_right "$tmp/out"
  grep -q "per iteration" "$tmp/out" && die "-I 0 still timed each iteration"
  for bad in "-G 1" "-D 1" "-J out.txt" "-K 2" "-I 1 -K 5 -n 5" "-R 3" "-u 5000" "-C 2" "-S x" "-T -1" \
             "-R 2 -u 1" "-R 1 --shared-mem"; do
    run "$tmp/out" "$bin/$prog" $bad
    [ $rc -eq 2 ] || die "'$bad': exit status $rc, not 2"
    grep -q "^$prog: " "$tmp/out.err" || die "'$bad': no message"
  done ;;
split) # nccl-tests' NCCL_TESTS_SPLIT: groups by a color made from the rank, each running the sweep at once
  NCCL_TESTS_SPLIT="MOD 2" run "$tmp/out" "$bin/$prog" --ranks 4 $short
  [ $rc -eq 0 ] || die "MOD 2: exit status $rc"
  expect_all_right "$tmp/out"
  grep -q "^# $prog: .*, 2 ranks, " "$tmp/out" && grep -q '^# split: NCCL_TESTS_SPLIT=MOD 2: 2 groups run at once' "$tmp/out" ||
    die "MOD 2: the header does not say 2 groups of 2 ranks"
  NCCL_TESTS_SPLIT_MASK=0x1 run "$tmp/out" "$bin/$prog" --ranks 3 $short
  [ $rc -eq 0 ] || die "MASK 0x1: exit status $rc"
  expect_all_right "$tmp/out"
  grep -q "^# $prog: .*, 2 ranks, " "$tmp/out" || die "MASK 0x1 on 3 ranks: rank 0's group has ranks 0 and 2"
  NCCL_TESTS_SPLIT="DIV 0" run "$tmp/out" "$bin/$prog" --ranks 2 $short
  [ $rc -eq 2 ] && grep -q "NCCL_TESTS_SPLIT=DIV 0: want" "$tmp/out.err" || die "DIV 0: status $rc" ;;
legs) # a program whose call is messages one after the other refuses to overlap them
  for bad in "-m 2" "-z 0" "--nonblocking 1"; do
    run "$tmp/out" "$bin/$prog" --ranks 2 $short $bad
    [ $rc -eq 2 ] && grep -q "^$prog: -m and -z 0 would overlap" "$tmp/out.err" || die "'$bad': status $rc"
  done ;;
mpi) # MPIRUN...: the MPI twin under mpirun, 2 ranks
  run "$tmp/out" "$@" "$bin/$prog" $short -d all -o sum,max
  [ $rc -eq 0 ] || die "exit status $rc"
  grep -q "^# $prog: mpi-openmpi .*, 2 ranks," "$tmp/out" || die "header"
  if [ "$prog" = barrier_perf_mpi ]; then [ "$(rows "$tmp/out" | wc -l)" -eq 1 ] || die "barrier row"
  else expect_all_right "$tmp/out"; fi
  run "$tmp/out" "$bin/$prog" --ranks 2
  [ $rc -eq 2 ] || die "--ranks must be refused by the MPI twin" ;;
roofline) # the machine's own figures: rows present and positive, every bound what its formula gives
  run "$tmp/out" "$bin/$prog" --ranks 1,2,3,5 --copy-bytes 1M --reps 1 -b 4K -e 64K -f 4 --blocks 1 --block-bytes 4M
  [ $rc -eq 0 ] || die "exit status $rc"
  cpus=$(sed -n 's/^# cpus: \([0-9]*\) usable$/\1/p' "$tmp/out")
  [ -n "$cpus" ] || die "no cpu count"
  # memcpy rows (cores, in all, per core, ratio), then bound rows (ranks, cores, bound, ratio), the
  # zero-copy path's bound rows (the same columns), then tcp rows (size, one way, both ways, running maximum of both ways): told apart by the header line
  # that opens each part
  awk -v cpus="$cpus" '
    /^# *cores at once/ { part = "copy"; next }
    /^# zero-copy all-reduce/ { zc = 1 }
    /^# *ranks +cores/ { part = zc ? "zbound" : "bound"; next }
    /^# *size +one way/ { part = "tcp"; next }
    /^#/ { next }
    part == "copy" { copy[$1] = $2; if ($2 <= 0 || $3 <= 0) bad = bad " copy:" $1; ncopy++ }
    part == "bound" {
      n = $1; k = (n < cpus) ? n : cpus
      if ($2 != k) bad = bad " cores-for-" n
      want = 2 * (n - 1) / (n * n) * copy[k]
      if ((want - $3) > 0.008 || ($3 - want) > 0.008) bad = bad " bound-for-" n "(" $3 "!=" want ")"
      nbound++
    }
    part == "zbound" {
      n = $1; k = (n < cpus) ? n : cpus
      want = 4 * (n - 1) / (n * (3 * n - 1)) * copy[k]
      if ((want - $3) > 0.008 || ($3 - want) > 0.008) bad = bad " zero-copy-bound-for-" n "(" $3 "!=" want ")"
      nzbound++
    }
    part == "tcp" {
      if ($2 <= 0 || $3 <= 0) bad = bad " tcp:" $1
      if ($3 > best) best = $3
      if ((best - $4) > 0.0006 || ($4 - best) > 0.0006) bad = bad " running-max-at-" $1
      sizes = sizes " " $1
    }
    END {
      if (ncopy < 2) bad = bad " copy-rows"
      if (nbound != 4) bad = bad " bound-rows"
      if (nzbound != 4) bad = bad " zero-copy-bound-rows"
      if (sizes != " 4096 16384 65536") bad = bad " tcp-sizes:" sizes
      if (bad) { print "FAIL:" bad; exit 1 }
    }' "$tmp/out" || exit 1
  # --per-size: a row per size and rank count above 1 (size, ranks, cores, memcpy, the kernel's
  # copy (0 where refused), the all-gather's writes, "|", the all-reduce, all-gather out of place
  # and in place, and broadcast bounds, each its formula of the row's memcpy or gather figure, and
  # nothing after them)
  run "$tmp/out" "$bin/$prog" --ranks 1,2,3,5 --copy-bytes 1M --reps 1 -b 4K -e 64K -f 4 --no-tcp --per-size
  [ $rc -eq 0 ] || die "--per-size: exit status $rc"
  awk -v cpus="$cpus" '
    function off(want, got) { return (want - got) > 0.008 || (got - want) > 0.008 }
    /^# *size +ranks +cores +memcpy +kernel/ { on = 1; next }
    /^#/ { next }
    on {
      n = $2; k = (n < cpus) ? n : cpus
      if ($3 != k || $4 <= 0 || $5 < 0 || $6 <= 0 || $7 != "|" || NF != 11) bad = bad " row-" $1 "-" n
      if (off(2 * (n - 1) / (n * n) * $4, $8)) bad = bad " all-reduce-" $1 "-" n
      if (off((n - 1) / (n * n) * $6, $9)) bad = bad " all-gather-" $1 "-" n
      if (off($4 / n, $10)) bad = bad " all-gather-in-place-" $1 "-" n
      if (off($4 / (n - 1), $11)) bad = bad " broadcast-" $1 "-" n
      rows = rows " " $1 ":" n
    }
    END {
      if (rows != " 4096:2 4096:3 4096:5 16384:2 16384:3 16384:5 65536:2 65536:3 65536:5") bad = bad " rows:" rows
      if (bad) { print "FAIL:" bad; exit 1 }
    }' "$tmp/out" || exit 1
  for bad in "--ranks 0" "--ranks x" "-b 1M -e 1K" "-f 1" "--blocks 0" "--block-bytes 0" "--copy-bytes 1" "--bogus 1" "-b"; do
    run "$tmp/out" "$bin/$prog" $bad
    [ $rc -eq 2 ] && grep -q "^roofline: " "$tmp/out.err" || die "'$bad': exit status $rc"
  done
  run "$tmp/out" "$bin/$prog" -h
  [ $rc -eq 0 ] && grep -q "^usage: roofline " "$tmp/out" || die "-h" ;;
*) die "unknown case $case_name" ;;
esac
echo "PASS"
