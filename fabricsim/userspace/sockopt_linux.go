//go:build linux

package userspace

import (
	"encoding/binary"
	"net"
	"os"

	"golang.org/x/sys/unix"
)

// tuneSocket sets the buffer sizes and asks for the TOS byte of received
// datagrams. It reports whether TOS is available.
func tuneSocket(c *net.UDPConn, buf int) (tos bool, err error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return false, err
	}
	var serr error
	cerr := rc.Control(func(fd uintptr) {
		root := os.Geteuid() == 0
		for _, o := range [][2]int{{unix.SO_RCVBUF, unix.SO_RCVBUFFORCE}, {unix.SO_SNDBUF, unix.SO_SNDBUFFORCE}} {
			if root && unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[1], buf) == nil {
				continue
			}
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, o[0], buf)
		}
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_RECVTOS, 1)
	})
	if cerr != nil {
		return false, cerr
	}
	return serr == nil, nil
}

var cmsgTOSSpace = unix.CmsgSpace(4)

// parseTOS returns the TOS byte in a received control message, 0 if none.
func parseTOS(oob []byte) byte {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafePointer(&oob[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return 0
		}
		if h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && l > unix.CmsgLen(0) {
			return oob[unix.CmsgLen(0)]
		}
		sp := unix.CmsgSpace(l - unix.CmsgLen(0))
		if sp > len(oob) {
			return 0
		}
		oob = oob[sp:]
	}
	return 0
}

// putTOS writes an IP_TOS control message carrying tos into b (len
// cmsgTOSSpace) and returns it.
func putTOS(b []byte, tos byte) []byte {
	b = b[:cmsgTOSSpace]
	clear(b)
	h := (*unix.Cmsghdr)(unsafePointer(&b[0]))
	h.Level = unix.IPPROTO_IP
	h.Type = unix.IP_TOS
	h.SetLen(unix.CmsgLen(4))
	binary.NativeEndian.PutUint32(b[unix.CmsgLen(0):], uint32(tos))
	return b
}
