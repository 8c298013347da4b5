//go:build !linux

package ioengine

import "net"

func tuneSocket(conn *net.UDPConn, cfg *Config) error {
	_ = conn.SetReadBuffer(cfg.SocketBuffer)
	_ = conn.SetWriteBuffer(cfg.SocketBuffer)
	return nil
}

func newRawBatcher(*net.UDPConn, *Port, int) (batcher, error) { return nil, nil }

func isTransient(error) bool { return false }
