package main

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel maps the 64 KiB around each page of a file mapping that faults in (fault-around,
// 16 pages), so code that runs a little of many functions spread over the binary — the node's
// clients' first lists — made 3.4 MiB of the binary resident within 50 ms, most of it never run;
// madvise does not change that (MADV_RANDOM, MADV_SEQUENTIAL, MADV_NOHUGEPAGE: measured, still
// 64 KiB a fault on 6.18). A mapping registered with a userfaultfd for write protection is not
// faulted around (mm/memory.c, should_fault_around): each fault maps its page alone. In the
// asynchronous mode (UFFD_FEATURE_WP_ASYNC, Linux 6.7) no handler is needed: the kernel resolves
// write-protect faults itself, and the binary's read-only segments are never written or
// write-protected anyway, so registering them only turns fault-around off. The descriptor must
// stay open: closing it unregisters the mappings.
//
// The structures and requests of <linux/userfaultfd.h>; the requests are _IOWR(0xAA, nr, size)
// in the encoding of x86, arm and arm64 (elsewhere the ioctl fails and nothing changes).
const (
	uffdUserModeOnly   = 1       // UFFD_USER_MODE_ONLY: allowed without CAP_SYS_PTRACE
	uffdAPI            = 0xAA    // UFFD_API
	uffdFeatureWPAsync = 1 << 15 // UFFD_FEATURE_WP_ASYNC
	uffdRegisterWP     = 1 << 1  // UFFDIO_REGISTER_MODE_WP
	uffdioAPI          = 0xc018aa3f
	uffdioRegister     = 0xc020aa00
)

type uffdioAPIArg struct{ api, features, ioctls uint64 }

type uffdioRegisterArg struct{ start, len, mode, ioctls uint64 }

// faultPageByPage turns fault-around off for spans (start, length), page-aligned mappings of
// this process, and returns the userfaultfd that does it, which the caller closes when it no
// longer wants that. It fails where the kernel cannot (older than 6.7; on arm64 than 6.10; never
// on 32-bit arm, which has no userfaultfd write protection) or a seccomp profile forbids
// userfaultfd; nothing is changed then, and fault-around stays.
func faultPageByPage(spans [][2]uintptr) (int, error) {
	r, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK|uffdUserModeOnly, 0, 0)
	if errno != 0 {
		return -1, fmt.Errorf("userfaultfd: %w", errno)
	}
	fd := int(r)
	api := uffdioAPIArg{api: uffdAPI, features: uffdFeatureWPAsync}
	if err := uffdIoctl(fd, uffdioAPI, unsafe.Pointer(&api)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("userfaultfd: asynchronous write protection: %w", err)
	}
	for _, sp := range spans {
		reg := uffdioRegisterArg{start: uint64(sp[0]), len: uint64(sp[1]), mode: uffdRegisterWP}
		if err := uffdIoctl(fd, uffdioRegister, unsafe.Pointer(&reg)); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("userfaultfd: register %#x+%#x: %w", sp[0], sp[1], err)
		}
	}
	return fd, nil
}

func uffdIoctl(fd int, req uintptr, arg unsafe.Pointer) error {
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg)); errno != 0 {
		return errno
	}
	return nil
}

// imagePageByPage turns fault-around off for the binary's read-only segments (faultPageByPage)
// and drops what start-up faulted in 64 KiB at a time (what runs comes back page by page: the
// node profile's start-up peak went from 20.0–22.5 to 16.2–20.3 MiB, the cold start unchanged);
// it returns what turns fault-around back on (nil when it was not turned off). An error says
// what was not done.
func imagePageByPage() (undo func(), err error) {
	spans, err := readOnlyImage()
	if err != nil {
		return nil, err
	}
	fd, err := faultPageByPage(spans)
	if err != nil {
		return nil, err
	}
	undo = func() { unix.Close(fd) }
	if _, err := dropSpans(spans); err != nil {
		return undo, fmt.Errorf("drop the pages start-up faulted in: %w", err)
	}
	return undo, nil
}
