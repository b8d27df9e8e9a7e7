//go:build unix

package cluster

import (
	"errors"
	"net"
	"syscall"
)

// peerClosed reports whether the peer of an idle pooled connection has
// closed it (its FIN or RST is queued: a node that was killed or stopped)
// or sent something unasked (a TLS close_notify before its FIN). A request
// written on such a connection would be read by nobody, yet the writer
// could not tell that from a peer that read it and then died: for a
// proposal that is an unknown outcome (504) where the truth is "not sent".
// It peeks at the socket without blocking and consumes nothing; a
// connection it cannot peek at (not a socket) is taken as open.
func peerClosed(c net.Conn) bool {
	if u, ok := c.(interface{ NetConn() net.Conn }); ok {
		c = u.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return true
	}
	closed := false
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// n > 0: unasked bytes; n == 0 without an error: end of stream;
		// any error but "nothing to read": reset or broken.
		closed = n > 0 || (rerr == nil && n == 0) ||
			(rerr != nil && !errors.Is(rerr, syscall.EAGAIN) && !errors.Is(rerr, syscall.EWOULDBLOCK))
		return true // never wait for readability
	})
	return closed || err != nil
}
