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
	"github.com/prometheus/client_golang/prometheus"

	"github.com/trustplane/trustplane/dialsrc"
	"github.com/trustplane/trustplane/internal/connlimit"
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

	// live are the connections past their handshake, accepted and dialled,
	// raft's and the RPC's (*trackedConn), until closed: Recheck closes
	// those whose peer the trust of the moment no longer accepts.
	live sync.Map

	// pending is the table of accepted connections being classified (TLS
	// handshake and first byte), package connlimit: a new connection
	// always gets a slot, a full table closes its oldest, one peer address
	// holds at most its share, and each must send its first byte (the
	// ClientHello) within the first-byte timeout and be classified within
	// handshakeTimeout. Idle or half-open connections therefore cost a
	// bounded number of goroutines and sockets and cannot keep a peer
	// from reconnecting; classified connections (raft's pooled ones, RPC
	// streams) are never affected.
	pending          *connlimit.Limiter
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

// ConnCollector reports the node's pending-connection tables, the raft
// port's and the gossip port's (package connlimit's figures, labelled
// listener="raft" and "gossip"), read at each scrape.
func (n *Node) ConnCollector() prometheus.Collector {
	return connlimit.Collector(func() []*connlimit.Limiter {
		ls := []*connlimit.Limiter{n.raftConns}
		if n.gossip != nil {
			ls = append(ls, n.gossip.conns)
		}
		return ls
	})
}

// advertiseAddr keeps the configured raft address verbatim (a host name
// stays a host name), because it is what peers dial and what their
// certificate check compares against.
type advertiseAddr string

func (a advertiseAddr) Network() string { return "tcp" }
func (a advertiseAddr) String() string  { return string(a) }

// handshakeLimits bound the connections being classified; zero fields
// mean the defaults (DefaultConfig's MaxPendingHandshakes,
// HandshakeTimeout and FirstByteTimeout).
type handshakeLimits struct {
	max       int
	timeout   time.Duration
	firstByte time.Duration
	clock     connlimit.Clock // nil: real time (tests inject one)
}

// serverTLS and clientTLS derive the two sides from the node's TLS config.
// Either CA pool serves both directions when the other is unset. A config
// with neither verifies chains itself in VerifyConnection, against a trust
// that changes live (certs.NodeVerifier while the node CA rotates):
// crypto/tls then only requires a certificate, and VerifyConnection, which
// it runs on every handshake on both sides, decides (Config.validate
// refuses a config that has neither).
func serverTLS(base *tls.Config) *tls.Config {
	c := base.Clone()
	c.ClientAuth = tls.RequireAndVerifyClientCert
	if c.ClientCAs == nil {
		c.ClientCAs = base.RootCAs
	}
	if liveVerify(base) {
		c.ClientAuth = tls.RequireAnyClientCert
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
	c.InsecureSkipVerify = liveVerify(base)
	if c.MinVersion < tls.VersionTLS13 {
		c.MinVersion = tls.VersionTLS13
	}
	return c
}

// liveVerify: base verifies peers in VerifyConnection alone.
func liveVerify(base *tls.Config) bool {
	return base.RootCAs == nil && base.ClientCAs == nil && base.VerifyConnection != nil
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
	if limits.firstByte <= 0 {
		limits.firstByte = d.FirstByteTimeout
	}
	s.handshakeTimeout = limits.timeout
	if s.pending, err = connlimit.New(connlimit.Config{
		Name: "raft", Max: limits.max, FirstByteTimeout: limits.firstByte, Timeout: limits.timeout,
		Logger: logger, Clock: limits.clock,
	}); err != nil {
		_ = inner.Close()
		return nil, fmt.Errorf("%w: raft port: %v", ErrInvalidConfig, err)
	}
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
		// Never refused here: a full table makes room by closing its
		// oldest connection (connlimit), so whoever filled it cannot keep
		// a peer out.
		go s.classify(s.pending.Track(c))
	}
}

// classify completes the TLS handshake (the client certificate check, and
// the caller's VerifyConnection hook), reads the first byte and routes the
// connection to the RPC server or to raft. The connection is in the
// pending table (acceptLoop) until its first byte is read, and may be
// dropped from it meanwhile (its reads then fail).
func (s *tlsStreamLayer) classify(raw *connlimit.Conn) {
	conn := tls.Server(raw, s.server)
	_ = conn.SetDeadline(time.Now().Add(s.handshakeTimeout))
	if err := conn.Handshake(); err != nil {
		if errors.Is(err, io.EOF) {
			// A port probe (TCP connect, then close) is not worth a warning.
			_ = conn.Close()
			s.rejectQuietly(fmt.Errorf("connection on the raft port from %s closed before the TLS handshake: %w", raw.RemoteAddr(), err))
			return
		}
		s.reject(raw, fmt.Errorf("refused connection on the raft port: TLS handshake failed (is the peer using a certificate from this cluster's CA?): %w", err))
		return
	}
	var first [1]byte
	if _, err := io.ReadFull(conn, first[:]); err != nil {
		_ = conn.Close()
		s.rejectQuietly(fmt.Errorf("connection on the raft port from %s closed before its first byte: %w", raw.RemoteAddr(), err))
		return
	}
	raw.Established()
	tc := s.track(conn)
	if first[0] == rpcMarker {
		h := s.rpc.Load()
		if h == nil {
			_ = tc.Close()
			return
		}
		(*h)(tc)
		return
	}
	_ = conn.SetDeadline(time.Time{})
	mc := &peekedConn{trackedConn: tc, first: first[0], has: true}
	select {
	case s.conns <- mc:
	case <-s.closed:
		_ = conn.Close()
	}
}

// reject refuses a connection: counted and logged by the pending table,
// whose warn line (at most one per interval, with counts) carries the last
// such error as last_error. A failed handshake is the clear sign of a node
// started with the wrong CA; logged per connection, it would let anyone
// who reaches the port flood the log.
func (s *tlsStreamLayer) reject(raw *connlimit.Conn, err error) {
	raw.Reject(err)
	if h := s.rejectHook.Load(); h != nil {
		(*h)(fmt.Errorf("%w (from %s)", err, raw.RemoteAddr()))
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

// trackedConn is a connection past its handshake, in the layer's live
// set until it is closed.
type trackedConn struct {
	*tls.Conn
	s *tlsStreamLayer
}

func (s *tlsStreamLayer) track(c *tls.Conn) *trackedConn {
	tc := &trackedConn{Conn: c, s: s}
	s.live.Store(tc, struct{}{})
	return tc
}

func (c *trackedConn) Close() error {
	c.s.live.Delete(c)
	return c.Conn.Close()
}

// Recheck closes every live connection whose peer the node no longer
// accepts (verify: the configuration's VerifyConnection, against the
// trust of the moment), and says how many it closed. After a node CA
// leaves the trust, a connection made with one of its certificates before
// is served no more; raft and the RPC dial again with what is trusted now.
func (s *tlsStreamLayer) Recheck() int {
	verify := s.server.VerifyConnection
	if verify == nil {
		return 0
	}
	n := 0
	s.live.Range(func(k, _ any) bool {
		c := k.(*trackedConn)
		if verify(c.ConnectionState()) != nil {
			_ = c.Close()
			n++
		}
		return true
	})
	return n
}

// peekedConn gives back the byte classify read.
type peekedConn struct {
	*trackedConn
	first byte
	has   bool
}

func (c *peekedConn) Read(p []byte) (int, error) {
	if c.has && len(p) > 0 {
		p[0] = c.first
		c.has = false
		return 1, nil
	}
	return c.trackedConn.Read(p)
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
	return s.track(conn), nil
}

// dialRPC opens an internal RPC connection to the node whose raft address
// is address: a TLS connection to its raft port, marker byte sent.
func (s *tlsStreamLayer) dialRPC(ctx context.Context, address raft.ServerAddress) (net.Conn, error) {
	nd := &net.Dialer{}
	if la := dialsrc.LocalAddr(s.bind, string(address)); la != nil {
		nd.LocalAddr = la
	}
	d := &tls.Dialer{NetDialer: nd, Config: s.client}
	dc, err := d.DialContext(ctx, "tcp", string(address))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", address, err)
	}
	c := s.track(dc.(*tls.Conn))
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
