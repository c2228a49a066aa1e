package dummyif

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// The rtnetlink messages are built by hand, field by field in host byte order, so the code is the
// same on 32- and 64-bit kernels: no Go struct is ever cast onto the wire.
//
//	nlmsghdr   len u32, type u16, flags u16, seq u32, pid u32            16 bytes
//	ifinfomsg  family u8, pad u8, type u16, index i32, flags u32, change u32  16 bytes
//	ifaddrmsg  family u8, prefixlen u8, flags u8, scope u8, index u32    8 bytes
//	rtattr     len u16, type u16, value, padded to 4 bytes

const (
	nlmsgHdrLen = 16
	ifinfoLen   = 16
	ifaddrLen   = 8
)

// nl is one NETLINK_ROUTE socket used for one request at a time.
type nl struct {
	fd  int
	seq atomic.Uint32
}

func openNetlink() (*nl, error) {
	// Unbound and unconnected: the kernel binds it on the first send, and plain write/read talk
	// to the kernel (port 0).
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	// A kernel that never answers must not hang the re-ensure loop.
	tv := unix.Timeval{Sec: 5}
	_ = unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	return &nl{fd: fd}, nil
}

func (c *nl) close() { unix.Close(c.fd) }

// do sends one request with NLM_F_ACK and returns the kernel's answer: nil, or the errno.
func (c *nl) do(typ, flags uint16, body []byte) error {
	seq := c.seq.Add(1)
	msg := make([]byte, nlmsgHdrLen, nlmsgHdrLen+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(nlmsgHdrLen+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], typ)
	binary.NativeEndian.PutUint16(msg[6:], flags|unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(msg[8:], seq)
	msg = append(msg, body...)
	if _, err := unix.Write(c.fd, msg); err != nil {
		return err
	}
	buf := make([]byte, 8192)
	for {
		n, err := unix.Read(c.fd, buf)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return err
		}
		for b := buf[:n]; len(b) >= nlmsgHdrLen; {
			l := int(binary.NativeEndian.Uint32(b[0:]))
			if l < nlmsgHdrLen || l > len(b) {
				return errors.New("netlink: truncated answer")
			}
			mtype := binary.NativeEndian.Uint16(b[4:])
			mseq := binary.NativeEndian.Uint32(b[8:])
			if mseq == seq && mtype == unix.NLMSG_ERROR {
				if l < nlmsgHdrLen+4 {
					return errors.New("netlink: short error message")
				}
				if code := int32(binary.NativeEndian.Uint32(b[nlmsgHdrLen:])); code != 0 {
					return unix.Errno(-code)
				}
				return nil
			}
			b = b[align(l):]
		}
	}
}

func align(n int) int { return (n + unix.RTA_ALIGNTO - 1) &^ (unix.RTA_ALIGNTO - 1) }

// attr appends one rtattr.
func attr(b []byte, typ uint16, value []byte) []byte {
	l := 4 + len(value)
	var h [4]byte
	binary.NativeEndian.PutUint16(h[0:], uint16(l))
	binary.NativeEndian.PutUint16(h[2:], typ)
	b = append(b, h[:]...)
	b = append(b, value...)
	for i := l; i < align(l); i++ {
		b = append(b, 0)
	}
	return b
}

func ifinfo(index int32, flags, change uint32) []byte {
	b := make([]byte, ifinfoLen)
	b[0] = unix.AF_UNSPEC
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	binary.NativeEndian.PutUint32(b[8:], flags)
	binary.NativeEndian.PutUint32(b[12:], change)
	return b
}

// createLink: RTM_NEWLINK with IFLA_IFNAME and IFLA_LINKINFO{IFLA_INFO_KIND}. EEXIST when a link
// of that name exists, EOPNOTSUPP when the kernel has no driver of that kind.
func (c *nl) createLink(name, kind string) error {
	b := ifinfo(0, 0, 0)
	b = attr(b, unix.IFLA_IFNAME, append([]byte(name), 0))
	b = attr(b, unix.IFLA_LINKINFO, attr(nil, unix.IFLA_INFO_KIND, []byte(kind)))
	return c.do(unix.RTM_NEWLINK, unix.NLM_F_CREATE|unix.NLM_F_EXCL, b)
}

// setUp: RTM_NEWLINK on the link named, with IFF_UP in flags and change (a no-op when up).
func (c *nl) setUp(name string) error {
	return c.do(unix.RTM_NEWLINK, 0, attr(ifinfo(0, unix.IFF_UP, unix.IFF_UP), unix.IFLA_IFNAME, append([]byte(name), 0)))
}

// deleteLink: RTM_DELLINK of the link named. ENODEV when there is none.
func (c *nl) deleteLink(name string) error {
	return c.do(unix.RTM_DELLINK, 0, attr(ifinfo(0, 0, 0), unix.IFLA_IFNAME, append([]byte(name), 0)))
}

// linkIndex is the index of the link named (SIOCGIFINDEX); ENODEV when there is none.
func linkIndex(name string) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFINDEX, ifr); err != nil {
		return 0, err
	}
	return int(ifr.Uint32()), nil
}

// addAddr: RTM_NEWADDR of ip as a host address (/32 or /128) on the index. EEXIST when present.
func (c *nl) addAddr(index int, ip net.IP) error {
	fam, bits, raw := byte(unix.AF_INET6), byte(128), ip.To16()
	var flags byte = unix.IFA_F_NODAD // usable at once: no duplicate address detection wait
	if v4 := ip.To4(); v4 != nil {
		fam, bits, raw, flags = unix.AF_INET, 32, v4, 0
	}
	b := make([]byte, ifaddrLen)
	b[0], b[1], b[2], b[3] = fam, bits, flags, unix.RT_SCOPE_UNIVERSE
	binary.NativeEndian.PutUint32(b[4:], uint32(index))
	b = attr(b, unix.IFA_LOCAL, raw)
	b = attr(b, unix.IFA_ADDRESS, raw)
	return c.do(unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, b)
}
