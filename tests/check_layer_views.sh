#!/bin/sh
# The compiler keeps the layer rules (CMakeLists.txt, CCL_LAYER_VIEWS):
# through a layer's view of lib/, a file of that layer can include its own
# layer and the ones below it, and cannot include one above it, nor (above
# lib/transports) a transport's own header. Each refusal is checked next
# to an include that must work, so a view that hides everything fails too.
# Usage: check_layer_views.sh CC INCLUDE_DIR VIEWS_DIR
set -eu
cc=$1 inc=$2 views=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
compiles() { # LAYER HEADER
  printf '#include "%s"\n' "$2" > "$tmp/t.c"
  "$cc" -fsyntax-only -I"$inc" -I"$views/$1" "$tmp/t.c" 2> "$tmp/err"
}
bad=0
expect() { # yes|no LAYER HEADER
  if compiles "$2" "$3"; then got=yes; else got=no; fi
  if [ "$got" != "$1" ]; then
    echo "check_layer_views: a $2 file including $3: compiled=$got, expected $1"
    cat "$tmp/err"
    bad=1
  fi
}
expect yes core core/comm.h
expect no core coll/coll.h
expect no core prims/wait.h
expect yes prims prims/wait.h
expect yes prims transports/transport.h
expect no prims algo/algo.h
expect yes transports transports/tcp/tcp.h
expect no plan transports/tcp/tcp.h
expect no coll transports/shm/shm.h
expect yes coll device/device.h
expect no device plan/plan.h
expect yes plan device/device.h
[ $bad = 0 ] && echo "check_layer_views: each layer's view lets in what the rules allow and nothing above"
exit $bad
