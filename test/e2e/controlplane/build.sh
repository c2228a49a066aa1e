#!/bin/sh
# Builds etcd, kube-apiserver, kube-controller-manager, kubectl and kubemark (the hollow node: the
# kubelet's and kube-proxy's own code with fake runtimes) from the Go module proxy, once per go.sum: the binaries
# are kept in a directory keyed by the hash of the module's go.mod, go.sum and this script.
# Prints that directory.
#
# Usage: build.sh [MODULE_DIR]. MODULE_DIR is one Kubernetes release's module (a go.mod pinning
# k8s.io/kubernetes and the etcd it needs, tools.go, etcd/): this script's own directory (v1.34)
# when not given, ../controlplane137 for v1.37. Each module has its own key, so both stay cached.
set -eu
here=$(cd "${1:-$(dirname "$0")}" && pwd)
key=$(cat "$here/go.mod" "$here/go.sum" "$0" | sha256sum | cut -c1-16)
dir="${NODEHUB_CP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodehub/controlplane}/$key"
if [ -x "$dir/kube-apiserver" ] && [ -x "$dir/etcd" ] && [ -x "$dir/kubectl" ] && [ -x "$dir/kube-controller-manager" ] && [ -x "$dir/kubemark" ]; then
	echo "$dir"
	exit 0
fi
mkdir -p "$dir.tmp"
kv=$(sed -n 's/^[[:space:]]*k8s.io\/kubernetes v\([0-9.]*\)$/\1/p' "$here/go.mod")
pkg=k8s.io/component-base/version
ver="-X $pkg.gitVersion=v$kv -X $pkg.gitMajor=${kv%%.*} -X $pkg.gitMinor=$(echo "$kv" | cut -d. -f2) -X $pkg.gitTreeState=clean"
echo "building etcd, kube-apiserver, kube-controller-manager, kubectl and kubemark into $dir (first time for this go.sum: a few minutes)" >&2
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags="-s $ver" -o "$dir.tmp/" ./etcd k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubectl k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubemark) >&2
rm -rf "$dir"
mv "$dir.tmp" "$dir"
echo "$dir"
