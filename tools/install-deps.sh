#!/bin/sh
# Installs the Debian packages libccl builds and tests with (skips what is
# already there). Uses sudo when not run as root.
set -eu
pkgs="build-essential clang cmake pkg-config libhwloc-dev check libsubunit-dev python3 libopenmpi-dev openmpi-bin iproute2 libibverbs-dev ibverbs-providers python3-numpy python3-pytest python3-pip python3-setuptools python3-torch libtorch-dev pybind11-dev"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
[ -z "$missing" ] && exit 0
echo "install-deps: installing$missing" >&2
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
