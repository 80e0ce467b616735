#!/bin/sh
# The layer rules of docs/design.md, checked on the source:
#   1. a file includes headers of its own layer or of a lower one, in this
#      order from the bottom: core, reduce, transports, prims, algo,
#      device, plan, coll;
#   2. outside lib/transports/, no file names a transport (includes a header
#      of transports/<name>/); the registry, the interface and the
#      connection manager are what the rest may use;
#   3. no file of lib/ calls the public API (include/ccl.h)
#      but for its pure naming helpers: the library's own work goes
#      through its internal calls (ccl__own_send, ccl__group_begin, ...).
# Usage: check_layers.sh SOURCE_DIR [--self-test]
# --self-test plants one breach of each rule in a copy of the tree and
# expects each to be found, so a checker that finds nothing fails.
set -eu
src=$1

rank() {
  case $1 in
    core) echo 0 ;; reduce) echo 1 ;; transports) echo 2 ;; prims) echo 3 ;; algo) echo 4 ;;
    device) echo 5 ;; plan) echo 6 ;; coll) echo 7 ;; *) echo -1 ;;
  esac
}

# Prints one line per breach under $1; returns how many (capped at 100).
check() {
  root=$1
  n=0
  for f in $(cd "$root" && find lib -name '*.c' -o -name '*.h' -o -name '*.cu' | sort); do
    layer=$(echo "$f" | cut -d/ -f2)
    own=$(rank "$layer")
    [ "$own" -ge 0 ] || { echo "$f: in no layer the rules know ($layer)"; n=$((n + 1)); continue; }
    # "#include "x/..." lines, with their numbers
    grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"[a-z_]*/' "$root/$f" | while IFS= read -r line; do
      num=${line%%:*}
      path=$(echo "$line" | sed 's/.*include[[:space:]]*"\([^"]*\)".*/\1/')
      top=${path%%/*}
      r=$(rank "$top")
      if [ "$r" -lt 0 ]; then
        echo "$f:$num: includes $path, in no layer the rules know"
      elif [ "$r" -gt "$own" ]; then
        echo "$f:$num: $layer includes $path, a header of $top, which is above it"
      fi
      case $path in
        transports/transport.h | transports/manager.h) ;;
        transports/*/*)
          [ "$layer" = transports ] || echo "$f:$num: $layer names a transport: includes $path" ;;
      esac
    done
  done
}

# Rule 3: calls of ccl.h's functions outside their definitions (CCL_API)
# and comments.
public_calls() {
  root=$1
  names=$(grep -ohE '\bccl_[a-z0-9_]+[[:space:]]*\(' "$root/include/ccl.h" | sed 's/[[:space:](]//g' | sort -u |
    grep -vxE 'ccl_dtype_size|ccl_dtype_name|ccl_status_string|ccl_op_name')
  pattern=$(echo $names | tr ' ' '|')
  (cd "$root" && grep -rnE "(^|[^a-z0-9_])($pattern)\(" lib --include='*.c' --include='*.h') |
    grep -v 'CCL_API' | grep -vE '^[^:]+:[0-9]+:[[:space:]]*(/\*|\*|//)' |
    sed 's/^\([^:]*:[0-9]*\):.*/\1: calls the public API (a call of include\/ccl.h from inside the library)/'
}

if [ "${2:-}" = --self-test ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  cp -r "$src/lib" "$src/include" "$tmp/"
  [ -z "$(check "$tmp")$(public_calls "$tmp")" ] ||
    { echo "check_layers: the copy has breaches before any was planted"; exit 1; }
  echo '#include "coll/coll.h"' >> "$tmp/lib/core/log.h"
  echo '#include "transports/tcp/tcp.h"' >> "$tmp/lib/plan/plan.h"
  found=$(check "$tmp")
  echo "$found" | grep -q 'lib/core/log.h:.*core includes coll/coll.h' ||
    { echo "check_layers: a core header including coll/ went unseen"; echo "$found"; exit 1; }
  echo "$found" | grep -q 'lib/plan/plan.h:.*plan names a transport' ||
    { echo "check_layers: plan/ naming tcp went unseen"; echo "$found"; exit 1; }
  printf 'static void planted(void) { (void)ccl_group_start(); }\n' >> "$tmp/lib/coll/issue.c"
  public_calls "$tmp" | grep -q 'lib/coll/issue.c:[0-9]*: calls the public API' ||
    { echo "check_layers: a call of ccl_group_start inside lib/ went unseen"; exit 1; }
  echo "check_layers: every planted breach found"
  exit 0
fi

found=$(check "$src"; public_calls "$src")
if [ -n "$found" ]; then
  echo "$found"
  echo "check_layers: $(echo "$found" | wc -l) breach(es) of the layer rules (docs/design.md, Layers)"
  exit 1
fi
echo "check_layers: every include of lib/ keeps the layer rules, and nothing there calls the public API"
