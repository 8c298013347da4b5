//go:build !linux

package userspace

import "net"

// Without Linux control messages the relay forwards TOS as 0 and never marks.
func tuneSocket(c *net.UDPConn, buf int) (bool, error) {
	_ = c.SetReadBuffer(buf)
	_ = c.SetWriteBuffer(buf)
	return false, nil
}

const cmsgTOSSpace = 0

func parseTOS([]byte) byte           { return 0 }
func putTOS(b []byte, _ byte) []byte { return nil }
