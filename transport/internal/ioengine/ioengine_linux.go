package ioengine

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// oobSize holds the receive control messages: TOS (24 bytes), RXQ_OVFL
// (24) and TIMESTAMPNS (32).
const oobSize = 128

func tuneSocket(conn *net.UDPConn, cfg *Config) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var errs []error
	is6 := conn.LocalAddr().(*net.UDPAddr).IP.To4() == nil
	cerr := rc.Control(func(fd uintptr) {
		s := int(fd)
		root := os.Geteuid() == 0
		for _, o := range [][2]int{{unix.SO_RCVBUF, unix.SO_RCVBUFFORCE}, {unix.SO_SNDBUF, unix.SO_SNDBUFFORCE}} {
			if root {
				if unix.SetsockoptInt(s, unix.SOL_SOCKET, o[1], cfg.SocketBuffer) == nil {
					continue
				}
			}
			if e := unix.SetsockoptInt(s, unix.SOL_SOCKET, o[0], cfg.SocketBuffer); e != nil {
				errs = append(errs, e)
			}
		}
		if e := unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_RXQ_OVFL, 1); e != nil {
			errs = append(errs, e)
		}
		if e := unix.SetsockoptInt(s, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); e != nil {
			errs = append(errs, e)
		}
		if cfg.ECN {
			if is6 {
				errs = append(errs, unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_TCLASS, ECNECT0),
					unix.SetsockoptInt(s, unix.IPPROTO_IPV6, unix.IPV6_RECVTCLASS, 1))
			} else {
				errs = append(errs, unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_TOS, ECNECT0),
					unix.SetsockoptInt(s, unix.IPPROTO_IP, unix.IP_RECVTOS, 1))
			}
		}
	})
	if cerr != nil {
		return cerr
	}
	return errors.Join(errs...)
}

// rawBatcher calls recvmmsg/sendmmsg on the socket directly: no allocation
// per datagram.
type rawBatcher struct {
	rc   syscall.RawConn
	port *Port
	is6  bool

	rhdr  []unix.Mmsghdr
	riov  []unix.Iovec
	rname []unix.RawSockaddrInet6
	roob  []byte
	rcur  *Batch
	rn    int
	rerr  syscall.Errno
	block bool

	whdr  []unix.Mmsghdr
	wiov  []unix.Iovec
	wname []unix.RawSockaddrInet6
	woob  []byte
	wcnt  []int          // datagrams carried by each message (GSO)
	wmsgs []unix.Mmsghdr // current slice being written
	wn    int
	werr  syscall.Errno
	gso   bool

	readFn, writeFn func(fd uintptr) bool
}

func newRawBatcher(conn *net.UDPConn, p *Port, n int) (batcher, error) {
	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, err
	}
	r := &rawBatcher{
		rc: rc, port: p, is6: conn.LocalAddr().(*net.UDPAddr).IP.To4() == nil,
		rhdr: make([]unix.Mmsghdr, n), riov: make([]unix.Iovec, n), rname: make([]unix.RawSockaddrInet6, n),
		roob: make([]byte, n*oobSize),
		whdr: make([]unix.Mmsghdr, n), wiov: make([]unix.Iovec, n), wname: make([]unix.RawSockaddrInet6, n),
		woob: make([]byte, n*gsoCmsgSpace), wcnt: make([]int, n),
		gso: p.cfg.GSO,
	}
	r.readFn = r.doRead
	r.writeFn = r.doWrite
	return r, nil
}

func (r *rawBatcher) doRead(fd uintptr) bool {
	hs := r.rhdr
	for i := range hs {
		buf := r.rcur.all[i].buf
		r.riov[i].Base = &buf[0]
		r.riov[i].SetLen(len(buf))
		h := &hs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&r.rname[i]))
		h.Namelen = unix.SizeofSockaddrInet6
		h.Iov = &r.riov[i]
		h.Iovlen = 1
		h.Control = &r.roob[i*oobSize]
		h.SetControllen(oobSize)
		h.Flags = 0
		hs[i].Len = 0
	}
	n, _, e := unix.Syscall6(unix.SYS_RECVMMSG, fd, uintptr(unsafe.Pointer(&hs[0])), uintptr(len(hs)), unix.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		r.rn, r.rerr = 0, e
		return !(e == unix.EAGAIN && r.block)
	}
	r.rn, r.rerr = int(n), 0
	return true
}

func (r *rawBatcher) read(b *Batch, block bool) (int, error) {
	r.rcur, r.block = b, block
	if err := r.rc.Read(r.readFn); err != nil {
		return 0, err
	}
	if r.rerr != 0 {
		if r.rerr == unix.EAGAIN || r.rerr == unix.EINTR {
			return 0, nil
		}
		return 0, r.rerr
	}
	n := r.rn
	b.Pkts = b.all[:n]
	var bytes uint64
	for i := 0; i < n; i++ {
		pk := &b.Pkts[i]
		l := int(r.rhdr[i].Len)
		pk.Buf = pk.buf[:l]
		bytes += uint64(l)
		pk.Addr = sockaddrToAddrPort(&r.rname[i])
		pk.TOS, pk.RxTime = 0, 0
		r.parseOOB(pk, r.roob[i*oobSize:i*oobSize+int(r.rhdr[i].Hdr.Controllen)])
	}
	r.port.c.rxBytes.Add(bytes)
	return n, nil
}

func (r *rawBatcher) parseOOB(pk *Packet, oob []byte) {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return
		}
		data := oob[unix.SizeofCmsghdr:l]
		switch {
		case h.Level == unix.IPPROTO_IP && h.Type == unix.IP_TOS && len(data) >= 1:
			pk.TOS = data[0]
		case h.Level == unix.IPPROTO_IPV6 && h.Type == unix.IPV6_TCLASS && len(data) >= 4:
			pk.TOS = byte(binary.NativeEndian.Uint32(data))
		case h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && len(data) >= 16:
			ts := (*unix.Timespec)(unsafe.Pointer(&data[0]))
			pk.RxTime = ts.Nano()
		case h.Level == unix.SOL_SOCKET && h.Type == unix.SO_RXQ_OVFL && len(data) >= 4:
			drops := uint64(binary.NativeEndian.Uint32(data))
			for {
				old := r.port.c.kernelDrops.Load()
				if drops <= old || r.port.c.kernelDrops.CompareAndSwap(old, drops) {
					break
				}
			}
		}
		adv := (l + 7) &^ 7
		if adv > len(oob) {
			return
		}
		oob = oob[adv:]
	}
}

func sockaddrToAddrPort(sa *unix.RawSockaddrInet6) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa4.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), port)
	case unix.AF_INET6:
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), port)
	}
	return netip.AddrPort{}
}

func (r *rawBatcher) putName(i int, ap netip.AddrPort) uint32 {
	sa := &r.wname[i]
	if !r.is6 {
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		sa4.Family = unix.AF_INET
		binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa4.Port))[:], ap.Port())
		sa4.Addr = ap.Addr().Unmap().As4()
		sa4.Zero = [8]uint8{}
		return unix.SizeofSockaddrInet4
	}
	sa.Family = unix.AF_INET6
	binary.BigEndian.PutUint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:], ap.Port())
	sa.Flowinfo = 0
	sa.Addr = ap.Addr().As16()
	sa.Scope_id = 0
	return unix.SizeofSockaddrInet6
}

func (r *rawBatcher) doWrite(fd uintptr) bool {
	hs := r.wmsgs
	n, _, e := unix.Syscall6(unix.SYS_SENDMMSG, fd, uintptr(unsafe.Pointer(&hs[0])), uintptr(len(hs)), unix.MSG_DONTWAIT, 0, 0)
	if e == unix.EAGAIN {
		return false // wait until writable
	}
	r.wn, r.werr = int(n), e
	return true
}

// GSO limits: segments per send and bytes per send (an IP datagram).
const (
	gsoMaxSegments = 64
	gsoMaxBytes    = 65000
)

var gsoCmsgSpace = unix.CmsgSpace(2)

// build fills the message headers for b: with GSO, runs of datagrams to
// the same address with the same size (the last may be shorter) become one
// message with one iovec per datagram and a UDP_SEGMENT control message.
// It returns the number of messages.
func (r *rawBatcher) build(b *Batch) int {
	k := len(b.Pkts)
	m := 0
	for i := 0; i < k; {
		first := &b.Pkts[i]
		seg := len(first.Buf)
		j := i + 1
		if r.gso {
			total := seg
			for j < k && j-i < gsoMaxSegments {
				pk := &b.Pkts[j]
				if pk.Addr != first.Addr || len(pk.Buf) > seg || len(pk.Buf) == 0 || total+len(pk.Buf) > gsoMaxBytes {
					break
				}
				total += len(pk.Buf)
				j++
				if len(pk.Buf) < seg {
					break // a short datagram ends the run
				}
			}
		}
		for x := i; x < j; x++ {
			pk := &b.Pkts[x]
			r.wiov[x].Base = &pk.Buf[0]
			r.wiov[x].SetLen(len(pk.Buf))
		}
		h := &r.whdr[m].Hdr
		h.Name = (*byte)(unsafe.Pointer(&r.wname[m]))
		h.Namelen = r.putName(m, first.Addr)
		h.Iov = &r.wiov[i]
		h.Iovlen = uint64(j - i)
		h.Flags = 0
		if j-i > 1 {
			oob := r.woob[m*gsoCmsgSpace : (m+1)*gsoCmsgSpace]
			ch := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
			ch.Level = unix.SOL_UDP
			ch.Type = unix.UDP_SEGMENT
			ch.SetLen(unix.CmsgLen(2))
			binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(seg))
			h.Control = &oob[0]
			h.SetControllen(gsoCmsgSpace)
		} else {
			h.Control = nil
			h.SetControllen(0)
		}
		r.wcnt[m] = j - i
		m++
		i = j
	}
	return m
}

func (r *rawBatcher) write(b *Batch) error {
	c := &r.port.c
	nmsg := r.build(b)
	done, pkt := 0, 0
	for done < nmsg {
		r.wmsgs = r.whdr[done:nmsg]
		if err := r.rc.Write(r.writeFn); err != nil {
			return err
		}
		c.txBatches.Add(1)
		if r.werr != 0 {
			if r.gso && (r.werr == unix.EIO || r.werr == unix.EINVAL || r.werr == unix.ENOPROTOOPT) && r.wcnt[done] > 1 {
				// No segmentation offload on this path: stop using it
				// and resend what is left one datagram per message.
				r.gso = false
				rest := &Batch{Pkts: b.Pkts[pkt:]}
				nmsg, done = r.build(rest), 0
				b = rest
				pkt = 0
				continue
			}
			// The first message failed (for example no route): skip it.
			c.txErrors.Add(uint64(r.wcnt[done]))
			pkt += r.wcnt[done]
			done++
			continue
		}
		for m := done; m < done+r.wn; m++ {
			for x := pkt; x < pkt+r.wcnt[m]; x++ {
				c.txBytes.Add(uint64(len(b.Pkts[x].Buf)))
			}
			c.txPackets.Add(uint64(r.wcnt[m]))
			pkt += r.wcnt[m]
		}
		done += r.wn
	}
	return nil
}

func isTransient(err error) bool {
	return errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOMEM) || errors.Is(err, unix.ECONNREFUSED)
}
