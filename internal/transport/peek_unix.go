//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package transport

import (
	"crypto/tls"
	"errors"
	"net"
	"syscall"
)

// peeker looks at a connection's socket; a call keeps one, so that a look
// allocates nothing but the socket's handle.
type peeker struct {
	look   func(fd uintptr) // p.lookAt, bound once
	b      [1]byte
	tls    bool // the socket carries TLS records
	closed bool
}

// recordAlert is the content type of a TLS record that carries an alert
// in the clear on the outside (TLS 1.2 and earlier).
const recordAlert = 21

// peerClosed reports whether the broker has closed conn: a look at its
// socket, without waiting or taking a byte, finds the end of the stream
// (or a reset, or another error) and nothing before it. On a TLS
// connection it looks at the socket under it, where a TLS 1.2 alert
// record waiting to be read (a close_notify) counts as closed too; a TLS
// 1.3 close_notify looks like any other record there (and a new
// connection's session tickets are such records), so a broker that sent
// one before closing is not seen. It is false for a connection that is
// open, has other bytes to read, or is not a socket.
func (p *peeker) peerClosed(conn net.Conn) bool {
	p.tls = false
	if tc, ok := conn.(*tls.Conn); ok {
		conn, p.tls = tc.NetConn(), true
	}
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	if p.look == nil {
		p.look = p.lookAt
	}
	p.closed = false
	_ = raw.Control(p.look)
	return p.closed
}

func (p *peeker) lookAt(fd uintptr) {
	n, _, err := syscall.Recvfrom(int(fd), p.b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	switch {
	case err == nil:
		p.closed = n == 0 || (p.tls && p.b[0] == recordAlert)
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EWOULDBLOCK), errors.Is(err, syscall.EINTR):
	default:
		p.closed = true
	}
}
