package dummyif

import (
	"errors"

	"golang.org/x/sys/unix"
)

func isPermission(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)
}

// ensure asks the kernel for each piece and takes "exists" for an answer: a present link gives
// its index, a present address EEXIST, a link already up a no-op. No state is read first, so a
// check of a link in place costs three small netlink round trips.
func (l *Link) ensure() error {
	c, err := openNetlink()
	if err != nil {
		return describe("open netlink for", l.Name, err)
	}
	defer c.close()
	index, err := linkIndex(l.Name)
	if errors.Is(err, unix.ENODEV) {
		if err = l.create(c); err == nil {
			index, err = linkIndex(l.Name)
		}
	}
	if err != nil {
		return describe("find link", l.Name, err)
	}
	if err := c.addAddr(index, l.IP); err != nil && !errors.Is(err, unix.EEXIST) {
		return describe("add "+l.IP.String()+" to", l.Name, err)
	}
	if err := c.setUp(l.Name); err != nil {
		return describe("set up", l.Name, err)
	}
	return nil
}

// create makes the link as a dummy, or as a port-less bridge on a kernel without the dummy driver.
func (l *Link) create(c *nl) error {
	kind := "dummy"
	err := c.createLink(l.Name, kind)
	if errors.Is(err, unix.EOPNOTSUPP) {
		kind = "bridge"
		err = c.createLink(l.Name, kind)
	}
	switch {
	case err == nil:
		l.mu.Lock()
		l.kind = kind
		l.mu.Unlock()
		return nil
	case errors.Is(err, unix.EEXIST):
		return nil
	}
	return describe("create link", l.Name, err)
}

// Remove deletes the link (for --cleanup-dummy-if); no link is not an error.
func (l *Link) Remove() error {
	c, err := openNetlink()
	if err != nil {
		return describe("open netlink for", l.Name, err)
	}
	defer c.close()
	if err := c.deleteLink(l.Name); err != nil && !errors.Is(err, unix.ENODEV) {
		return describe("delete link", l.Name, err)
	}
	return nil
}
