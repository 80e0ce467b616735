#!/bin/sh
# Installs what libccl builds and tests with (Chromium: the trace viewer's
# browser tests), skipping what is already
# there: the Debian packages (Debian's torch 1.13 runs on /usr/bin/python3),
# then, from PyPI into the python3 first on PATH, one pinned PyTorch 2.x
# release with numpy and pytest (the torch backend's suite runs on both).
# Uses sudo when not run as root.
set -eu
TORCH2=2.11.0 # the release the project's GPU machine carries
pkgs="build-essential clang cmake pkg-config libhwloc-dev check libsubunit-dev python3 libopenmpi-dev openmpi-bin iproute2 libibverbs-dev ibverbs-providers python3-numpy python3-pytest python3-pip python3-setuptools python3-torch libtorch-dev pybind11-dev chromium"
missing=""
for p in $pkgs; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
if [ -n "$missing" ]; then
  echo "install-deps: installing$missing" >&2
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq $missing >/dev/null
fi

# PyTorch 2.x: PyPI's Linux wheel is a CUDA build (about 3 GB with its
# NVIDIA libraries, 46 s to install on a 2-core machine with a fast
# mirror); pip keeps the wheels in its cache, so a second machine set-up
# from the same cache downloads nothing. Where the python3 on PATH is
# Debian's own (no pip of its own) or PyPI cannot be reached, the torch 2.x
# suite is skipped, saying why.
py=$(command -v python3 || true)
if [ -z "$py" ] || [ "$(readlink -f "$py")" = "$(readlink -f /usr/bin/python3)" ]; then
  echo "install-deps: no python3 on PATH apart from Debian's; the torch $TORCH2 suite will be skipped" >&2
  exit 0
fi
if "$py" -c "import sys, torch, numpy, pytest; sys.exit(torch.__version__.split('+')[0] != '$TORCH2')" 2>/dev/null; then
  exit 0
fi
echo "install-deps: installing torch==$TORCH2, numpy and pytest from PyPI into $py (once: about 3 GB)" >&2
start=$(date +%s)
if PIP_ROOT_USER_ACTION=ignore "$py" -m pip install -q "torch==$TORCH2" numpy pytest >&2; then
  echo "install-deps: torch $TORCH2 installed in $(($(date +%s) - start)) s" >&2
else
  echo "install-deps: could not install torch $TORCH2 from PyPI; the torch $TORCH2 suite will be skipped" >&2
fi
