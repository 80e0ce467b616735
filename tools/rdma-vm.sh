#!/bin/sh
# tools/rdma-vm.sh: run a command inside a small virtual machine that has
# two soft-RoCE RDMA devices, so that the ib transport is tested for real on
# a machine whose own kernel has no RDMA.
#
#   tools/rdma-vm.sh [-w DIR] [-k DIR]... 'COMMAND'
#
# The guest is Debian's own kernel (with the rdma_rxe module) booted by qemu
# under software emulation, with a busybox initramfs. It mounts this
# machine's root file system read-only over 9p, so the binaries of the build
# tree run there as they are; /tmp, /var/tmp, /dev/shm and /run are its own,
# except for the folders it keeps: the current one, this script's source
# tree and each -k DIR stay visible (read-only) at their own paths, so a
# clone or a build under /tmp runs in the VM as anywhere else. With -w,
# DIR (on this machine) is mounted read-write at the same path, for results.
# Inside, a veth pair v0 <-> v1 (192.0.2.1 and 192.0.2.2) carries the two
# devices, rxe0 on v0 and rxe1 on v1; give ranks on different simulated
# hosts different devices (CCL_IB_HCA) and RDMA traffic crosses the pair.
# The pair's MTU is CCL_RDMA_VM_MTU (default 9000): jumbo frames, as RoCE
# fabrics are set up, so the devices' path MTU is 4096 (at 1500 it is
# 1024, and soft-RoCE under emulation spends most of its time per packet:
# both libccl and Open MPI over UCX ran about three times slower there).
# netem is loaded, so a test can make a link drop packets (tc qdisc).
# The pair is lossless but may reorder a queue pair's packets (each is
# queued on the vCPU that sends it); tests/rdma_suite.sh turns on RPS for
# in-order delivery, benchmarks keep this default (docs/design.md says why).
#
# Exit status: COMMAND's; 77 when no VM can run here (no qemu, no kernel
# package: the reason is printed); 125 when the guest did not finish.
# Needs root the first time, to install packages; later runs reuse the
# kernel and initramfs kept in $CCL_RDMA_VM_CACHE (default
# /var/tmp/ccl-rdma-vm). CCL_RDMA_VM_TIMEOUT bounds a run (seconds, 1800);
# CCL_RDMA_VM_MTU sets the link's MTU (above).
set -eu

skip() { echo "rdma-vm: SKIP: $*" >&2; exit 77; }

share=""
# The folders the guest keeps from under its own /tmp, /run, /var/tmp and
# /dev/shm: the current one and this script's tree, and each -k DIR.
keep="$(pwd)
$(cd "$(dirname "$0")/.." && pwd)"
while [ $# -gt 1 ]; do
  case $1 in
  -w) share=$(cd "$2" && pwd) ;;
  -k) keep="$keep
$(cd "$2" && pwd)" || exit 2 ;;
  *) break ;;
  esac
  shift 2
done
[ $# -eq 1 ] || { echo "usage: $0 [-w DIR] [-k DIR]... 'COMMAND'" >&2; exit 2; }
command=$1
cache=${CCL_RDMA_VM_CACHE:-/var/tmp/ccl-rdma-vm}
mkdir -p "$cache"

# ---- what the host needs: qemu, busybox, the verbs providers ----
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/sbin/$1" ] || [ -x "/usr/sbin/$1" ]; }
install_missing() {
  missing=""
  have qemu-system-x86_64 || missing="$missing qemu-system-x86"
  [ -x /bin/busybox ] || missing="$missing busybox-static"
  have cpio || missing="$missing cpio"
  have depmod || missing="$missing kmod"
  have rdma || missing="$missing iproute2"
  have ib_write_bw || missing="$missing perftest"
  have ibv_devinfo || missing="$missing ibverbs-utils"
  ls /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so >/dev/null 2>&1 || missing="$missing ibverbs-providers"
  [ -z "$missing" ] && return 0
  [ "$(id -u)" = 0 ] || skip "missing packages ($missing ) and not root to install them"
  echo "rdma-vm: installing$missing" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null 2>&1; } ||
    skip "cannot install$missing"
}
install_missing
have qemu-system-x86_64 || skip "qemu-system-x86_64 is not installed"

# ---- the guest kernel: Debian's, unpacked once ----
kernel_tree="$cache/kernel"
if [ ! -f "$cache/vmlinuz" ]; then
  kernel_pkg() { apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/.*Depends: \(linux-image-[0-9][^ ]*\).*/\1/p' | head -n 1; }
  pkg=$(kernel_pkg)
  if [ -z "$pkg" ] && [ "$(id -u)" = 0 ]; then
    apt-get update -qq >/dev/null 2>&1 || true
    pkg=$(kernel_pkg)
  fi
  [ -n "$pkg" ] || skip "apt knows no linux-image-amd64 package to boot"
  tmp=$(mktemp -d "$cache/dl.XXXXXX")
  (cd "$tmp" && apt-get download "$pkg" >/dev/null 2>&1) || { rm -rf "$tmp"; skip "cannot download $pkg"; }
  rm -rf "$kernel_tree"
  dpkg-deb -x "$tmp"/*.deb "$kernel_tree"
  rm -rf "$tmp"
  kver=$(ls "$kernel_tree/lib/modules" | head -n 1)
  depmod -b "$kernel_tree" "$kver"
  cp "$kernel_tree/boot/vmlinuz-$kver" "$cache/vmlinuz.part" && mv "$cache/vmlinuz.part" "$cache/vmlinuz"
  rm -f "$cache/initrd-5.gz"
fi
kver=$(ls "$kernel_tree/lib/modules" | head -n 1)
moddir="$kernel_tree/lib/modules/$kver"

# ---- the initramfs: busybox, the modules in dependency order, an init ----
modules_in_order() {
  # Prints the module files for each wanted module, dependencies first.
  for want in "$@"; do
    line=$(grep -E "(^|/)$want\.ko(\.[a-z]+)?:" "$moddir/modules.dep") || { echo "rdma-vm: no module $want" >&2; return 1; }
    deps=${line#*:}
    for d in $(printf '%s\n' $deps | sed '1!G;h;$!d'); do echo "$d"; done
    echo "${line%%:*}"
  done | awk '!seen[$0]++'
}

if [ ! -f "$cache/initrd-5.gz" ]; then
  root=$(mktemp -d)
  mkdir -p "$root/bin" "$root/lib/modules" "$root/host" "$root/proc" "$root/sys" "$root/dev"
  cp /bin/busybox "$root/bin/busybox"
  modules_in_order crc32_generic virtio_pci 9pnet_virtio 9p veth sch_netem rdma_rxe rdma_ucm >"$root/lib/modules/load" ||
    skip "the kernel package lacks a module the VM needs"
  while read -r m; do cp "$moddir/$m" "$root/lib/modules/"; done <"$root/lib/modules/load"
  cat >"$root/init" <<'EOF'
#!/bin/busybox sh
bb=/bin/busybox
$bb mount -t proc proc /proc
$bb mount -t sysfs sys /sys
$bb mount -t devtmpfs dev /dev
while read -r m; do $bb insmod "/lib/modules/${m##*/}" || echo "rdma-vm: insmod ${m##*/} failed"; done </lib/modules/load
$bb mount -t 9p -o trans=virtio,version=9p2000.L,ro hostroot /host || echo "rdma-vm: cannot mount the host"
$bb mkdir -p /dev/shm
for d in proc sys dev; do $bb mount --bind /$d /host/$d; done
param() { $bb tr ' ' '\n' </proc/cmdline | $bb sed -n "s/^$1=//p" | $bb base64 -d; }
# Folders to keep from under the guest's own /tmp, /run, /var/tmp and
# /dev/shm: held aside, then bound again on top of the fresh tmpfs.
nl='
'
IFS=$nl
n=0
$bb mkdir -p /keep
for k in $(param keep); do
  case $k in /tmp/*|/run/*|/var/tmp/*|/dev/shm/*) ;; *) continue ;; esac
  n=$((n + 1))
  $bb mkdir -p "/keep/$n" && $bb mount -o bind "/host$k" "/keep/$n" && echo "$k" >"/keep/$n.path" ||
    echo "rdma-vm: cannot keep $k"
done
unset IFS
for d in tmp run var/tmp dev/shm; do $bb mount -t tmpfs "$d" "/host/$d"; done
for f in /keep/*.path; do
  [ -f "$f" ] || continue
  k=$($bb cat "$f")
  $bb mkdir -p "/host$k" && $bb mount -o bind "${f%.path}" "/host$k" || echo "rdma-vm: cannot keep $k"
done
share=$(param share)
if [ -n "$share" ]; then
  $bb mkdir -p "/host$share"
  $bb mount -t 9p -o trans=virtio,version=9p2000.L share "/host$share" || echo "rdma-vm: cannot mount $share"
fi
mtu=$(param mtu)
$bb chroot /host /bin/sh -c '
  ip link set lo up
  ip link add v0 type veth peer name v1
  ip link set v0 mtu "$0" && ip link set v1 mtu "$0"
  ip addr add 192.0.2.1/24 dev v0 && ip addr add 192.0.2.2/24 dev v1
  ip link set v0 up && ip link set v1 up
  # Soft-RoCE sends through the network stack: with the default backlog
  # (1000 packets) a burst of RDMA packets overflows it, packets are
  # dropped, and the kernel retransmitting reads can fail the queue
  # pair. A real RoCE fabric is lossless (PFC); so is this, now.
  echo 100000 >/proc/sys/net/core/netdev_max_backlog
  sleep 1
  rdma link add rxe0 type rxe netdev v0 && rdma link add rxe1 type rxe netdev v1 || echo "rdma-vm: no soft-RoCE devices"' "${mtu:-1500}"
echo "rdma-vm: command starts"
$bb chroot /host /bin/sh -c "cd \"\${0}\" && eval \"\$1\"" "$(param dir)" "$(param cmd)"
echo "rdma-vm: command exit $?"
$bb sync
$bb poweroff -f
EOF
  chmod 755 "$root/init"
  (cd "$root" && find . | cpio -o -H newc 2>/dev/null | gzip -1 >"$cache/initrd.part") && mv "$cache/initrd.part" "$cache/initrd-5.gz"
  rm -rf "$root"
fi

# ---- boot, run, report ----
b64() { printf '%s' "$1" | base64 -w0; }
set -- -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap"
[ -n "$share" ] && set -- "$@" -virtfs "local,path=$share,mount_tag=share,security_model=none,multidevs=remap"
# clocksource=tsc: emulated HPET reads cost about a microsecond each in the
# guest (vDSO time stamps 0.1 us with the TSC), a cost no real machine has
# and that would land on code that reads the clock while it waits.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
timeout "${CCL_RDMA_VM_TIMEOUT:-1800}" qemu-system-x86_64 -accel tcg -smp 2 -m "${CCL_RDMA_VM_MEM:-3072}" \
  -nographic -no-reboot -nic none -kernel "$cache/vmlinuz" -initrd "$cache/initrd-5.gz" "$@" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 clocksource=tsc tsc=reliable cmd=$(b64 "$command") dir=$(b64 "$(pwd)") share=$(b64 "$share") keep=$(b64 "$keep") mtu=$(b64 "${CCL_RDMA_VM_MTU:-9000}")" \
  </dev/null >"$log" 2>&1 || true
# The console interleaves kernel messages: find the markers anywhere.
tr -d '\r' <"$log" | awk '/rdma-vm: command exit [0-9]/{exit} on{print} /rdma-vm: command starts/{on=1}'
grep -a '^rdma-vm: \(no\|cannot\|insmod\)' "$log" >&2 || true
rc=$(tr -d '\r' <"$log" | sed -n 's/.*rdma-vm: command exit \([0-9]*\).*/\1/p' | tail -n 1)
if [ -z "$rc" ]; then
  echo "rdma-vm: the guest did not finish (timeout or crash); the end of its console:" >&2
  tail -n 20 "$log" >&2
  exit 125
fi
exit "$rc"
