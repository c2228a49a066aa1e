#!/bin/sh
# Builds the real kube-proxy (k8s.io/kubernetes/cmd/kube-proxy) of one Kubernetes release from the
# control plane's module (../controlplane for v1.34, ../controlplane137 for v1.37), without
# changing that module: once per its go.mod, go.sum and this script, into a directory of its own
# keyed by their hash. Prints that directory.
#
# Usage: build.sh [CONTROLPLANE_MODULE_DIR] (default: ../controlplane, v1.34).
set -eu
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
here=$(cd "${1:-$(dirname "$0")/../controlplane}" && pwd)
key=$(cat "$here/go.mod" "$here/go.sum" "$self" | sha256sum | cut -c1-16)
dir="${NODEHUB_CP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodehub/controlplane}/kube-proxy-$key"
if [ -x "$dir/kube-proxy" ]; then
	echo "$dir"
	exit 0
fi
mkdir -p "$dir.tmp"
kv=$(sed -n 's/^[[:space:]]*k8s.io\/kubernetes v\([0-9.]*\)$/\1/p' "$here/go.mod")
pkg=k8s.io/component-base/version
ver="-X $pkg.gitVersion=v$kv -X $pkg.gitMajor=${kv%%.*} -X $pkg.gitMinor=$(echo "$kv" | cut -d. -f2) -X $pkg.gitTreeState=clean"
echo "building kube-proxy v$kv into $dir (first time for this go.sum)" >&2

(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags="-s $ver" -o "$dir.tmp/" k8s.io/kubernetes/cmd/kube-proxy) >&2
rm -rf "$dir"
mv "$dir.tmp" "$dir"
echo "$dir"
