#!/bin/sh
# The programs the end-to-end tests run besides the control plane: promtool checks /metrics,
# busybox runs the gateway init script, qemu-user-static runs the ARM binaries. `make test` (and so
# .ci/run) calls this first: it installs what is missing with apt-get (as root, or with sudo when
# that needs no password) and otherwise says in one line what to install.
set -eu
missing=""
command -v promtool >/dev/null 2>&1 || missing="$missing prometheus"
command -v busybox >/dev/null 2>&1 || missing="$missing busybox"
{ command -v qemu-aarch64-static && command -v qemu-arm-static; } >/dev/null 2>&1 || missing="$missing qemu-user-static"
# flannel (test/e2e/flannel) and the real kube-proxy program iptables or nftables in their node's
# namespace; flannel builds with cgo on amd64.
for p in ip:iproute2 nft:nftables iptables-restore:iptables gcc:gcc; do command -v "${p%%:*}" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "${p%%:*}" >/dev/null 2>&1 || missing="$missing ${p#*:}"; done
[ -z "$missing" ] && exit 0
sudo=""
[ "$(id -u)" = 0 ] || { sudo -n true 2>/dev/null && sudo="sudo -n"; }
if ! command -v apt-get >/dev/null 2>&1 || { [ "$(id -u)" != 0 ] && [ -z "$sudo" ]; }; then
	echo "build/deps.sh: the tests need promtool, busybox, qemu-user-static, iproute2, nftables, iptables and gcc; install the packages:$missing (Debian/Ubuntu names) and run again" >&2
	exit 1
fi
echo "build/deps.sh: installing$missing" >&2
$sudo apt-get update -qq
# shellcheck disable=SC2086 # one word per package
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
