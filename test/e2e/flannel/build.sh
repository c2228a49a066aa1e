#!/bin/sh
# Builds flanneld (github.com/flannel-io/flannel's main, as published) from the Go module proxy,
# once per go.sum: the binary is kept in a directory keyed by the hash of this module's go.mod,
# go.sum, tools.go and this script. Prints that directory.
# On amd64 flannel builds with cgo, as its own Makefile does: its udp backend's proxy is C and has
# no pure-Go build there (no build tag leaves it out); elsewhere CGO_ENABLED=0.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
key=$(cat "$here/go.mod" "$here/go.sum" "$here/tools.go" "$here/build.sh" | sha256sum | cut -c1-16)
dir="${NODEHUB_CP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodehub/controlplane}/flannel-$key"
if [ -x "$dir/flanneld" ]; then
	echo "$dir"
	exit 0
fi
cgo=0
[ "$(go env GOARCH)" = amd64 ] && cgo=1
mkdir -p "$dir.tmp"
echo "building flanneld into $dir (first time for this go.sum)" >&2
(cd "$here" && CGO_ENABLED=$cgo go build -trimpath -ldflags=-s -o "$dir.tmp/flanneld" github.com/flannel-io/flannel) >&2
rm -rf "$dir"
mv "$dir.tmp" "$dir"
echo "$dir"
