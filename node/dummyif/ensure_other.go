//go:build !linux

package dummyif

func isPermission(error) bool { return false }

func (l *Link) ensure() error { return ErrUnsupported }

// Remove deletes the link; nothing to do where there is none.
func (l *Link) Remove() error { return nil }
