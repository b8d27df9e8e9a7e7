package cluster

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"
)

// Config is everything a Node needs. The cmd package fills it from flags;
// nothing in this package reads flags or the environment. Zero durations
// and counts take the defaults from DefaultConfig when New is called, so a
// caller sets only what it cares about.
type Config struct {
	// NodeName is the raft ServerID. It must stay the same across restarts
	// of one node and be unique in the cluster.
	NodeName string
	// DataDir holds the raft log and snapshots (in DataDir/raft).
	DataDir string
	// RaftAddr is the host:port raft listens on and the address it gives
	// peers. It must be reachable by them, so an unspecified host (0.0.0.0,
	// ::) is refused. Port 0 picks a free port (tests only: peers cannot know
	// it in advance).
	RaftAddr string
	// BootstrapExpect is the number of servers to see before the first
	// election. 1 bootstraps a single-node cluster on the first start; 0
	// never bootstraps (the node waits to be added). Larger values are
	// handled by discovery, which is not part of this package yet.
	BootstrapExpect int
	// TLS carries the node certificate and the CA pool for raft's mutual
	// TLS: Certificates (or both GetCertificate and GetClientCertificate) and
	// RootCAs and/or ClientCAs (either is used for both directions when the
	// other is nil). The node certificate must allow both client and server
	// auth, because it is presented when dialling and when accepting.
	// ServerName, if set, is the name checked in every peer's certificate;
	// otherwise the host of the peer's raft address is, so node
	// certificates must then carry their raft host as a SAN. Any
	// VerifyPeerCertificate / VerifyConnection hook is kept, which is where
	// a caller restricts peers to node identities. The config is cloned.
	TLS *tls.Config
	// ApplyTimeout bounds how long Propose waits for raft to accept an
	// entry (including waiting for a leader to be elected), and how long
	// ReadIndex waits for a new leader's term barrier.
	ApplyTimeout time.Duration
	// SnapshotThreshold is how many log entries since the last snapshot
	// trigger a new one (checked every SnapshotInterval).
	SnapshotThreshold uint64
	SnapshotInterval  time.Duration
	// TrailingLogs is how many entries are kept after a snapshot, so a
	// briefly lagging follower catches up from the log instead of needing
	// the whole snapshot.
	TrailingLogs uint64
	// Logger receives the node's and raft's logs (raft's at Info and up).
	Logger *slog.Logger
}

// DefaultConfig returns a Config with every tunable set. The caller must
// still set NodeName, DataDir, RaftAddr and TLS.
func DefaultConfig() *Config {
	return &Config{
		BootstrapExpect:   1,
		ApplyTimeout:      10 * time.Second,
		SnapshotThreshold: 8192,
		SnapshotInterval:  30 * time.Second,
		TrailingLogs:      10240,
		Logger:            slog.Default(),
	}
}

// withDefaults returns a copy of c with zero tunables replaced by their
// defaults. The caller's struct is never modified.
func (c *Config) withDefaults() *Config {
	out := *c
	d := DefaultConfig()
	if out.ApplyTimeout == 0 {
		out.ApplyTimeout = d.ApplyTimeout
	}
	if out.SnapshotThreshold == 0 {
		out.SnapshotThreshold = d.SnapshotThreshold
	}
	if out.SnapshotInterval == 0 {
		out.SnapshotInterval = d.SnapshotInterval
	}
	if out.TrailingLogs == 0 {
		out.TrailingLogs = d.TrailingLogs
	}
	if out.Logger == nil {
		out.Logger = d.Logger
	}
	return &out
}

// Validate reports the first problem with c, wrapped in ErrInvalidConfig.
// Zero tunables are valid (they mean "default").
func (c *Config) Validate() error {
	if err := c.validateCommon(); err != nil {
		return err
	}
	return c.validateNetwork()
}

// validateCommon checks what every node needs, whatever its transport.
func (c *Config) validateCommon() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	switch {
	case c == nil:
		return bad("nil config")
	case c.NodeName == "":
		return bad("NodeName is empty")
	case c.DataDir == "":
		return bad("DataDir is empty")
	case c.BootstrapExpect < 0:
		return bad("BootstrapExpect %d is negative", c.BootstrapExpect)
	case c.ApplyTimeout < 0:
		return bad("ApplyTimeout %s is negative", c.ApplyTimeout)
	case c.SnapshotInterval < 0:
		return bad("SnapshotInterval %s is negative", c.SnapshotInterval)
	}
	return nil
}

// validateNetwork checks the raft address and TLS settings used by the
// real network transport.
func (c *Config) validateNetwork() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	host, port, err := net.SplitHostPort(c.RaftAddr)
	if err != nil {
		return bad("RaftAddr %q: %v", c.RaftAddr, err)
	}
	if host == "" {
		return bad("RaftAddr %q has no host; peers need an address they can dial", c.RaftAddr)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return bad("RaftAddr %q is not an address peers can dial", c.RaftAddr)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil {
		return bad("RaftAddr %q: bad port", c.RaftAddr)
	} else if p == 0 && c.BootstrapExpect != 1 {
		return bad("RaftAddr %q: port 0 is only usable by a single-node cluster", c.RaftAddr)
	}
	if c.TLS == nil {
		return bad("TLS is required: raft traffic is always mutual TLS")
	}
	if len(c.TLS.Certificates) == 0 && (c.TLS.GetCertificate == nil || c.TLS.GetClientCertificate == nil) {
		return bad("TLS has no node certificate (Certificates, or both GetCertificate and GetClientCertificate)")
	}
	if c.TLS.RootCAs == nil && c.TLS.ClientCAs == nil {
		return bad("TLS has no CA pool (RootCAs or ClientCAs)")
	}
	return nil
}
