package cluster

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// tlsStreamLayer is raft's StreamLayer over mutual TLS: every raft
// connection, in either direction, presents the node certificate and
// requires the peer's to chain to the cluster CA. Without it anyone who can
// reach the raft port could append to the log.
type tlsStreamLayer struct {
	ln        net.Listener // a tls.NewListener
	advertise net.Addr
	client    *tls.Config
}

var _ raft.StreamLayer = (*tlsStreamLayer)(nil)

// advertiseAddr keeps the configured raft address verbatim (a host name
// stays a host name), because it is what peers dial and what their
// certificate check compares against.
type advertiseAddr string

func (a advertiseAddr) Network() string { return "tcp" }
func (a advertiseAddr) String() string  { return string(a) }

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
func newTLSStreamLayer(bind, advertise string, base *tls.Config) (*tlsStreamLayer, error) {
	inner, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("cluster: listen for raft on %s: %w", bind, err)
	}
	var adv net.Addr = advertiseAddr(advertise)
	if _, port, err := net.SplitHostPort(advertise); err != nil || port == "0" {
		adv = inner.Addr()
	}
	return &tlsStreamLayer{
		ln:        tls.NewListener(inner, serverTLS(base)),
		advertise: adv,
		client:    clientTLS(base),
	}, nil
}

// Accept returns the next connection. The TLS handshake (and with it the
// client certificate check) runs on the connection's first read, in raft's
// per-connection goroutine, so a slow or hostile peer cannot stall the
// accept loop; a peer without a valid certificate fails there and raft
// closes the connection before reading any RPC.
func (s *tlsStreamLayer) Accept() (net.Conn, error) { return s.ln.Accept() }

// Close stops accepting; raft's NetworkTransport calls it on shutdown.
func (s *tlsStreamLayer) Close() error { return s.ln.Close() }

// Addr is the advertised raft address, which raft records as this
// server's address in the configuration.
func (s *tlsStreamLayer) Addr() net.Addr { return s.advertise }

// Dial connects to a peer and completes the handshake within timeout, so a
// peer with a certificate from another CA is refused before raft sends
// anything to it.
func (s *tlsStreamLayer) Dial(address raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout}
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
