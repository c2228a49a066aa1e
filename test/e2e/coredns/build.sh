#!/bin/sh
# Builds CoreDNS (this module's main: CoreDNS's coremain with its bind, errors and kubernetes
# plugins) from the Go module proxy, once per go.sum: the binary is kept in a directory keyed by
# the hash of this module's go.mod, go.sum, main.go and this script. Prints that directory.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
key=$(cat "$here/go.mod" "$here/go.sum" "$here/main.go" "$here/build.sh" | sha256sum | cut -c1-16)
dir="${NODEHUB_CP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nodehub/controlplane}/coredns-$key"
if [ -x "$dir/coredns" ]; then
	echo "$dir"
	exit 0
fi
mkdir -p "$dir.tmp"
echo "building coredns into $dir (first time for this go.sum)" >&2
(cd "$here" && CGO_ENABLED=0 go build -trimpath -ldflags=-s -o "$dir.tmp/coredns" .) >&2
rm -rf "$dir"
mv "$dir.tmp" "$dir"
echo "$dir"
