package dummyif

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

func isPermission(err error) bool {
	return errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES)
}

func (l *Link) ensure() error {
	c, err := openNetlink()
	if err != nil {
		return describe("open netlink for", l.Name, err)
	}
	defer c.close()
	ifc, err := net.InterfaceByName(l.Name)
	if err != nil {
		if ifc, err = l.create(c); err != nil {
			return err
		}
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return describe("read addresses of", l.Name, err)
	}
	if !holds(addrs, l.IP) {
		if err := c.addAddr(ifc.Index, l.IP); err != nil && !errors.Is(err, unix.EEXIST) {
			return describe("add "+l.IP.String()+" to", l.Name, err)
		}
	}
	if ifc.Flags&net.FlagUp == 0 {
		if err := c.setUp(ifc.Index); err != nil {
			return describe("set up", l.Name, err)
		}
	}
	return nil
}

// create makes the link with the first kind the kernel has.
func (l *Link) create(c *nl) (*net.Interface, error) {
	var err error
	for _, kind := range kinds {
		err = c.createLink(l.Name, kind)
		if err == nil || errors.Is(err, unix.EEXIST) {
			if err == nil {
				l.mu.Lock()
				l.kind = kind
				l.mu.Unlock()
			}
			break
		}
		if !errors.Is(err, unix.EOPNOTSUPP) {
			return nil, describe("create link", l.Name, err)
		}
	}
	if err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, describe("create link", l.Name, err)
	}
	ifc, err := net.InterfaceByName(l.Name)
	if err != nil {
		return nil, describe("find created link", l.Name, err)
	}
	return ifc, nil
}

func holds(addrs []net.Addr, ip net.IP) bool {
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

// Remove deletes the link (for --cleanup-dummy-if); no link is not an error.
func (l *Link) Remove() error {
	ifc, err := net.InterfaceByName(l.Name)
	if err != nil {
		return nil
	}
	c, err := openNetlink()
	if err != nil {
		return describe("open netlink for", l.Name, err)
	}
	defer c.close()
	if err := c.deleteLink(ifc.Index); err != nil && !errors.Is(err, unix.ENODEV) {
		return describe("delete link", l.Name, err)
	}
	return nil
}
