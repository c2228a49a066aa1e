//go:build !linux

package hub

import "syscall"

func setFreebind(string, string, syscall.RawConn) error { return nil }
