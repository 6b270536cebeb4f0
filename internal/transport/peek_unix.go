//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package transport

import (
	"errors"
	"net"
	"syscall"
)

// peeker looks at a connection's socket; a call keeps one, so that a look
// allocates nothing but the socket's handle.
type peeker struct {
	look   func(fd uintptr) // p.lookAt, bound once
	b      [1]byte
	closed bool
}

// peerClosed reports whether the broker has closed conn: a look at its
// socket, without waiting or taking a byte, finds the end of the stream
// (or a reset, or another error) and nothing before it. It is false for a
// connection that is open, has bytes to read, or is not a socket.
func (p *peeker) peerClosed(conn net.Conn) bool {
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
		p.closed = n == 0
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EWOULDBLOCK), errors.Is(err, syscall.EINTR):
	default:
		p.closed = true
	}
}
