package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane/dialsrc"
)

// tlsStreamLayer is raft's StreamLayer over mutual TLS: every raft
// connection, in either direction, presents the node certificate and
// requires the peer's to chain to the cluster CA. Without it anyone who can
// reach the raft port could append to the log.
//
// The listener also carries the internal RPC (rpc.go): after the handshake
// the first byte of every accepted connection is peeked. Raft's own RPC
// type bytes are small (0..4); rpcMarker selects the internal RPC, which is
// served on its own goroutine, and anything else goes to raft with the
// byte put back.
type tlsStreamLayer struct {
	ln        net.Listener // the plain TCP listener; TLS is added per connection
	server    *tls.Config
	advertise net.Addr
	client    *tls.Config
	logger    *slog.Logger
	// bind is the address raft listens on. Outbound raft and RPC
	// connections start from it when dialsrc's rule allows (a specific IP
	// of the destination's class), so that peers, and the chaos tool's
	// fault proxies, see this node's own address as the source.
	bind string

	conns     chan net.Conn // classified raft connections, for Accept
	closed    chan struct{}
	closeOnce sync.Once

	// pending holds a slot for every accepted connection that is being
	// classified (TLS handshake and first byte), each for at most
	// handshakeTimeout. A connection that finds no slot is closed at
	// accept: a flood of idle or half-open connections costs at most
	// cap(pending) goroutines and sockets, and connections that are already
	// classified (raft's pooled ones) are never affected.
	pending          chan struct{}
	handshakeTimeout time.Duration

	// rpc serves an internal RPC connection (the marker byte already
	// read); nil until the node is running, and such connections are
	// closed meanwhile.
	rpc atomic.Pointer[func(net.Conn)]
	// rejectHook, if set, is told about every connection refused before
	// reaching raft or the RPC (tests).
	rejectHook atomic.Pointer[func(error)]
}

var _ raft.StreamLayer = (*tlsStreamLayer)(nil)

// advertiseAddr keeps the configured raft address verbatim (a host name
// stays a host name), because it is what peers dial and what their
// certificate check compares against.
type advertiseAddr string

func (a advertiseAddr) Network() string { return "tcp" }
func (a advertiseAddr) String() string  { return string(a) }

// handshakeLimits bound the connections being classified; zero fields
// mean the defaults (DefaultConfig's MaxPendingHandshakes and
// HandshakeTimeout).
type handshakeLimits struct {
	max     int
	timeout time.Duration
}

// serverTLS and clientTLS derive the two sides from the node's TLS config.
// Either CA pool serves both directions when the other is unset.
func serverTLS(base *tls.Config) *tls.Config {
	c := base.Clone()
	c.ClientAuth = tls.RequireAndVerifyClientCert
	if c.ClientCAs == nil {
		c.ClientCAs = base.RootCAs
	}
	if c.MinVersion < tls.VersionTLS13 {
		c.MinVersion = tls.VersionTLS13
	}
	return c
}

func clientTLS(base *tls.Config) *tls.Config {
	c := base.Clone()
	if c.RootCAs == nil {
		c.RootCAs = base.ClientCAs
	}
	c.InsecureSkipVerify = false
	if c.MinVersion < tls.VersionTLS13 {
		c.MinVersion = tls.VersionTLS13
	}
	return c
}

// newTLSStreamLayer listens on bind. advertise is the address peers use;
// when empty (or with port 0) the listener's actual address is used.
// Refused connections are logged to logger (nil discards).
func newTLSStreamLayer(bind, advertise string, base *tls.Config, logger *slog.Logger, limits handshakeLimits) (*tlsStreamLayer, error) {
	inner, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("cluster: listen for raft on %s: %w", bind, err)
	}
	var adv net.Addr = advertiseAddr(advertise)
	if _, port, err := net.SplitHostPort(advertise); err != nil || port == "0" {
		adv = inner.Addr()
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &tlsStreamLayer{
		ln:        inner,
		server:    serverTLS(base),
		advertise: adv,
		client:    clientTLS(base),
		logger:    logger,
		bind:      bind,
		conns:     make(chan net.Conn),
		closed:    make(chan struct{}),
	}
	d := DefaultConfig()
	if limits.max <= 0 {
		limits.max = d.MaxPendingHandshakes
	}
	if limits.timeout <= 0 {
		limits.timeout = d.HandshakeTimeout
	}
	s.pending = make(chan struct{}, limits.max)
	s.handshakeTimeout = limits.timeout
	go s.acceptLoop()
	return s, nil
}

// acceptLoop accepts TCP connections and classifies each on its own
// goroutine, so a slow or hostile peer cannot stall accepting.
func (s *tlsStreamLayer) acceptLoop() {
	backoff := 5 * time.Millisecond
	for {
		c, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.closed:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		select {
		case s.pending <- struct{}{}:
			go s.classify(c)
		default:
			_ = c.Close()
			s.rejectQuietly(fmt.Errorf("refused connection on the raft port from %s: %d connections are in their TLS handshake already", c.RemoteAddr(), cap(s.pending)))
		}
	}
}

// classify completes the TLS handshake (the client certificate check, and
// the caller's VerifyConnection hook), reads the first byte and routes the
// connection to the RPC server or to raft. It holds a pending slot (taken
// by acceptLoop) until the first byte is read or the connection refused.
func (s *tlsStreamLayer) classify(raw net.Conn) {
	var once sync.Once
	release := func() { once.Do(func() { <-s.pending }) }
	defer release()
	conn := tls.Server(raw, s.server)
	_ = conn.SetDeadline(time.Now().Add(s.handshakeTimeout))
	if err := conn.Handshake(); err != nil {
		_ = conn.Close()
		if errors.Is(err, io.EOF) {
			// A port probe (TCP connect, then close) is not worth a warning.
			s.rejectQuietly(fmt.Errorf("connection on the raft port from %s closed before the TLS handshake: %w", raw.RemoteAddr(), err))
			return
		}
		s.reject(fmt.Errorf("refused connection on the raft port from %s: TLS handshake failed (is the peer using a certificate from this cluster's CA?): %w", raw.RemoteAddr(), err))
		return
	}
	var first [1]byte
	if _, err := io.ReadFull(conn, first[:]); err != nil {
		_ = conn.Close()
		s.rejectQuietly(fmt.Errorf("connection on the raft port from %s closed before its first byte: %w", raw.RemoteAddr(), err))
		return
	}
	release()
	if first[0] == rpcMarker {
		h := s.rpc.Load()
		if h == nil {
			_ = conn.Close()
			return
		}
		(*h)(conn)
		return
	}
	_ = conn.SetDeadline(time.Time{})
	mc := &peekedConn{Conn: conn, first: first[0], has: true}
	select {
	case s.conns <- mc:
	case <-s.closed:
		_ = conn.Close()
	}
}

// reject logs a refused connection. A handshake failure is the clear log
// line for a node started with the wrong CA.
func (s *tlsStreamLayer) reject(err error) {
	s.logger.Warn(err.Error())
	if h := s.rejectHook.Load(); h != nil {
		(*h)(err)
	}
}

// rejectQuietly is reject at debug level, for connections that are
// closed early rather than refused.
func (s *tlsStreamLayer) rejectQuietly(err error) {
	s.logger.Debug(err.Error())
	if h := s.rejectHook.Load(); h != nil {
		(*h)(err)
	}
}

// peekedConn gives back the byte classify read.
type peekedConn struct {
	*tls.Conn
	first byte
	has   bool
}

func (c *peekedConn) Read(p []byte) (int, error) {
	if c.has && len(p) > 0 {
		p[0] = c.first
		c.has = false
		return 1, nil
	}
	return c.Conn.Read(p)
}

// Accept returns the next raft connection: its handshake (and with it the
// client certificate check) has completed and its first byte was not the
// RPC marker. A peer without a valid certificate never reaches raft.
func (s *tlsStreamLayer) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.closed:
		return nil, net.ErrClosed
	}
}

// Close stops accepting; raft's NetworkTransport calls it on shutdown.
func (s *tlsStreamLayer) Close() error {
	err := net.ErrClosed
	s.closeOnce.Do(func() {
		close(s.closed)
		err = s.ln.Close()
	})
	return err
}

// Addr is the advertised raft address, which raft records as this
// server's address in the configuration.
func (s *tlsStreamLayer) Addr() net.Addr { return s.advertise }

// Dial connects to a peer and completes the handshake within timeout, so a
// peer with a certificate from another CA is refused before raft sends
// anything to it.
func (s *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
	if la := dialsrc.LocalAddr(s.bind, string(address)); la != nil {
		d.LocalAddr = la
	}
	conn, err := tls.DialWithDialer(d, "tcp", string(address), s.client)
	if err != nil {
		var certErr *tls.CertificateVerificationError
		if errors.As(err, &certErr) {
			return nil, fmt.Errorf("cluster: raft peer %s presented an untrusted certificate: %w", address, err)
		}
		return nil, fmt.Errorf("cluster: dial raft peer %s: %w", address, err)
	}
	return conn, nil
}

// dialRPC opens an internal RPC connection to the node whose raft address
// is address: a TLS connection to its raft port, marker byte sent.
func (s *tlsStreamLayer) dialRPC(ctx context.Context, address raft.ServerAddress) (net.Conn, error) {
	nd := &net.Dialer{}
	if la := dialsrc.LocalAddr(s.bind, string(address)); la != nil {
		nd.LocalAddr = la
	}
	d := &tls.Dialer{NetDialer: nd, Config: s.client}
	c, err := d.DialContext(ctx, "tcp", string(address))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", address, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetWriteDeadline(dl)
	} else {
		_ = c.SetWriteDeadline(time.Now().Add(s.handshakeTimeout))
	}
	if _, err := c.Write([]byte{rpcMarker}); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("dial %s: %w", address, err)
	}
	return c, nil
}
