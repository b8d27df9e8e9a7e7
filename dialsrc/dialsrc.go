package dialsrc

import (
	"context"
	"net"
)

// LocalAddr is the local address to dial dest (host:port) from, for a node
// bound to bindHost (a host, or a host:port whose port is ignored). It is
// nil, meaning "let the kernel choose", unless both are IP addresses of
// the same class (see the package doc): binding a loopback source for a
// remote destination, or a remote source for a loopback one, would make
// the connection fail.
func LocalAddr(bindHost, dest string) *net.TCPAddr {
	ip := source(bindHost, dest)
	if ip == nil {
		return nil
	}
	return &net.TCPAddr{IP: ip}
}

// source is the IP to bind, or nil.
func source(bindHost, dest string) net.IP {
	if h, _, err := net.SplitHostPort(bindHost); err == nil {
		bindHost = h
	}
	bind := net.ParseIP(bindHost)
	if bind == nil || bind.IsUnspecified() {
		return nil
	}
	dhost, _, err := net.SplitHostPort(dest)
	if err != nil {
		return nil
	}
	d := net.ParseIP(dhost)
	if d == nil || d.IsUnspecified() {
		return nil
	}
	if bind.IsLoopback() != d.IsLoopback() {
		return nil
	}
	if (bind.To4() == nil) != (d.To4() == nil) {
		return nil
	}
	return bind
}

// DialContext returns a dial function for an http.Transport (or any
// caller that learns the destination only at dial time): it dials with a
// copy of base whose LocalAddr follows LocalAddr(bindHost, address).
// base.LocalAddr, if set, is replaced.
func DialContext(bindHost string, base net.Dialer) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		d := base
		d.LocalAddr = nil
		if la := LocalAddr(bindHost, address); la != nil {
			d.LocalAddr = la
		}
		return d.DialContext(ctx, network, address)
	}
}
