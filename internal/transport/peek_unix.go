//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package transport

import (
	"errors"
	"net"
	"syscall"
)

// peerClosed reports whether the broker has closed conn: a look at its
// socket, without waiting or taking a byte, finds the end of the stream
// (or a reset, or another error) and nothing before it. It is false for a
// connection that is open, has bytes to read, or is not a socket.
func peerClosed(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	var b [1]byte
	_ = raw.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case err == nil:
			closed = n == 0
		case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.EWOULDBLOCK), errors.Is(err, syscall.EINTR):
		default:
			closed = true
		}
	})
	return closed
}
