//go:build tools

// Package tools pins flannel's module (github.com/flannel-io/flannel, as published) so build.sh
// builds its flanneld from this module's go.sum.
package tools

import _ "github.com/flannel-io/flannel"
