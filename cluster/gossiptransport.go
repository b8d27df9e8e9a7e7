package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/trustplane/trustplane/dialsrc"
	"github.com/trustplane/trustplane/internal/connlimit"
)

// The gossip transport is memberlist's NetTransport with three additions,
// all on the wire format memberlist v0.6.0 speaks (net.go, label.go):
//
//   - Inbound TCP streams pass through a pending table (connlimit) and a
//     guard before memberlist reads them. memberlist reads an encrypted
//     stream's declared length (up to 20 MiB) and buffers that much before
//     it can authenticate a single byte (decryptRemoteState), so each
//     unauthenticated connection could cost the node 20 MiB or more, and
//     nothing bounded the connections. The guard reads the few bytes of
//     framing (label header, message type, length) itself and refuses a
//     stream that is not encrypted or declares more than
//     maxGossipStreamBytes, so memberlist never allocates for it; the
//     table bounds the streams served at once (Config.MaxGossipStreams),
//     closing the oldest when full and silent ones at the first-byte
//     deadline.
//   - The gossip label (GossipLabelMode), added to outbound streams and
//     packets and checked on inbound ones here, not by memberlist: see
//     GossipLabelMode for why memberlist's own Config.Label is left empty.
//   - TCP dials start from the gossip bind IP, under dialsrc's rule. UDP
//     needs nothing: it is sent from the bound socket.

const (
	// gossipLabel is trustplane's gossip label.
	gossipLabel = "trustplane"

	// maxGossipStreamBytes bounds the length an inbound gossip stream may
	// declare. A stream carries one message: push/pull state (every member
	// with its metadata, at most memberlist.MetaMaxSize (512) bytes, name,
	// address and a few counters: under 1 KiB a member, encrypted and
	// usually compressed), a TCP ping, or a user message (trustplane sends
	// none). 256 KiB holds the state of over 250 members; a trustplane
	// cluster has 3 to 7 voters, and a few failed members until they are
	// reaped. memberlist's own bound is 20 MiB.
	maxGossipStreamBytes = 256 << 10

	// Message types of memberlist's wire format (net.go's messageType).
	gossipEncryptMsg  = 10
	gossipHasLabelMsg = 244

	// gossipRefusalLogEvery spaces the warn lines about refused gossip
	// packets (streams are logged by their pending table).
	gossipRefusalLogEvery = 10 * time.Second
)

// GossipLabelMode says how a node uses the gossip label. A rolling upgrade
// from nodes without labels goes accept (the default: every node
// understands labels) → send (every node labels what it sends) → require
// (every node refuses what is unlabelled); each step is itself a rolling
// restart, and at every moment any two nodes understand each other.
//
// The label is added and checked by this transport, outside memberlist's
// encryption; memberlist's own Config.Label is left empty. memberlist's
// label cannot be introduced in a rolling upgrade: a node without it
// discards every labelled stream and packet ("unacceptable label"), and
// with it the label is part of every message's authenticated data, so a
// labelled node cannot decrypt an unlabelled node's messages either
// (SkipInboundLabelCheck only helps a transport that strips the header,
// and still authenticates with the label). Switching memberlist's label
// on would split gossip between old and new nodes for the length of the
// upgrade, and with it leader discovery and forwarding. Binding the label
// into the encryption adds nothing here: the gossip key is per cluster
// (its CA directory), and cluster identity is checked on every member's
// metadata (admit).
type GossipLabelMode string

const (
	// GossipLabelAccept sends no label and accepts streams and packets
	// with trustplane's label or none; any other label is refused.
	GossipLabelAccept GossipLabelMode = "accept"
	// GossipLabelSend labels every stream and packet it sends, and
	// accepts as GossipLabelAccept does. Every node must accept labels
	// (run a release with them) before any node sends them.
	GossipLabelSend GossipLabelMode = "send"
	// GossipLabelRequire labels what it sends and refuses unlabelled
	// streams and packets. Every node must send labels first.
	GossipLabelRequire GossipLabelMode = "require"
)

// sends reports whether the mode labels outbound traffic, or an error for
// a mode that does not exist. The empty mode is GossipLabelAccept.
func (m GossipLabelMode) sends() (bool, error) {
	switch m {
	case "", GossipLabelAccept:
		return false, nil
	case GossipLabelSend, GossipLabelRequire:
		return true, nil
	}
	return false, fmt.Errorf("gossip label mode %q: want %s, %s or %s", m, GossipLabelAccept, GossipLabelSend, GossipLabelRequire)
}

// Errors of the inbound gossip guard. They name what was wrong with the
// framing, never quote it.
var (
	errGossipForeignLabel = errors.New("gossip stream with another cluster's label")
	errGossipUnlabelled   = errors.New("gossip stream without a label (the gossip label is required)")
	errGossipNotEncrypted = errors.New("gossip stream that is not an encrypted message")
	errGossipTooLong      = fmt.Errorf("gossip stream declaring more than %d bytes", maxGossipStreamBytes)
)

// boundTransport is the gossip transport (see above). Its loops start with
// it and end at Shutdown, which memberlist calls.
type boundTransport struct {
	*memberlist.NetTransport
	bind    string // the gossip bind host
	conns   *connlimit.Limiter
	send    bool // label outbound traffic
	require bool // refuse unlabelled inbound traffic
	logger  *slog.Logger

	streams chan net.Conn
	packets chan *memberlist.Packet
	// stopping is closed when Shutdown starts: from then on the loops
	// drop what the NetTransport hands them instead of passing it on, but
	// keep reading, because its listeners block sending into unbuffered
	// channels and would never see it stop (its Shutdown waits for them).
	// done is closed once the NetTransport has stopped, and ends the loops.
	stopping chan struct{}
	done     chan struct{}
	once     sync.Once

	refusedPackets atomic.Uint64
	packetLog      struct {
		sync.Mutex
		last    time.Time
		pending uint64 // refusals since the last line
	}
}

var _ memberlist.NodeAwareTransport = (*boundTransport)(nil)

// DialTimeout overrides NetTransport's, which dials with no local address,
// and starts the stream with the label header when the mode sends it.
func (t *boundTransport) DialTimeout(addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if la := dialsrc.LocalAddr(t.bind, addr); la != nil {
		d.LocalAddr = la
	}
	c, err := d.Dial("tcp", addr)
	if err != nil || !t.send {
		return c, err
	}
	_ = c.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := c.Write(labelHeader(nil)); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetWriteDeadline(time.Time{})
	return c, nil
}

// DialAddressTimeout is DialTimeout for memberlist's node-aware callers.
func (t *boundTransport) DialAddressTimeout(a memberlist.Address, timeout time.Duration) (net.Conn, error) {
	return t.DialTimeout(a.Addr, timeout)
}

// WriteTo sends a packet, labelled when the mode sends labels.
func (t *boundTransport) WriteTo(b []byte, addr string) (time.Time, error) {
	if t.send {
		b = labelHeader(b)
	}
	return t.NetTransport.WriteTo(b, addr)
}

// WriteToAddress is WriteTo for memberlist's node-aware callers.
func (t *boundTransport) WriteToAddress(b []byte, a memberlist.Address) (time.Time, error) {
	return t.WriteTo(b, a.Addr)
}

// StreamCh is the inbound streams that passed the guard.
func (t *boundTransport) StreamCh() <-chan net.Conn { return t.streams }

// PacketCh is the inbound packets that passed the label check, without
// their label header.
func (t *boundTransport) PacketCh() <-chan *memberlist.Packet { return t.packets }

// Shutdown stops the NetTransport, then the loops (see stopping). It may
// be called more than once.
func (t *boundTransport) Shutdown() error {
	var err error
	t.once.Do(func() {
		close(t.stopping)
		err = t.NetTransport.Shutdown()
		close(t.done)
	})
	return err
}

// labelHeader is memberlist's label header (label.go) before rest.
func labelHeader(rest []byte) []byte {
	b := make([]byte, 0, 2+len(gossipLabel)+len(rest))
	b = append(b, gossipHasLabelMsg, byte(len(gossipLabel)))
	b = append(b, gossipLabel...)
	return append(b, rest...)
}

// acceptStreams tracks every stream NetTransport accepts and guards each on
// its own goroutine (the table bounds how many are pending).
func (t *boundTransport) acceptStreams() {
	in := t.NetTransport.StreamCh()
	for {
		select {
		case c := <-in:
			select {
			case <-t.stopping:
				_ = c.Close()
			default:
				go t.guardStream(t.conns.Track(c))
			}
		case <-t.done:
			return
		}
	}
}

// guardStream reads a stream's framing and hands memberlist a stream that
// replays what was read, without the label header; or refuses it.
// memberlist never sees a stream that declares more than
// maxGossipStreamBytes.
func (t *boundTransport) guardStream(c *connlimit.Conn) {
	pre, err := readGossipFraming(c, t.require)
	if err != nil {
		if errors.Is(err, errGossipForeignLabel) || errors.Is(err, errGossipUnlabelled) ||
			errors.Is(err, errGossipNotEncrypted) || errors.Is(err, errGossipTooLong) {
			c.Reject(err)
		} else {
			_ = c.Close() // closed or dropped before its framing arrived
		}
		return
	}
	rc := &replayConn{Conn: c, pre: pre}
	select {
	case t.streams <- rc:
	case <-t.stopping:
		_ = c.Close()
	}
}

// readGossipFraming reads an optional label header, the message type and,
// for an encrypted message, its declared length; it returns the bytes to
// replay (type and length). It reads 2+255+1+4 bytes at most, whatever the
// peer sends.
func readGossipFraming(r io.Reader, require bool) ([]byte, error) {
	var b [5]byte
	if _, err := io.ReadFull(r, b[:1]); err != nil {
		return nil, err
	}
	if b[0] == gossipHasLabelMsg {
		if _, err := io.ReadFull(r, b[:1]); err != nil {
			return nil, err
		}
		label := make([]byte, b[0])
		if _, err := io.ReadFull(r, label); err != nil {
			return nil, err
		}
		if string(label) != gossipLabel {
			return nil, errGossipForeignLabel
		}
		if _, err := io.ReadFull(r, b[:1]); err != nil {
			return nil, err
		}
	} else if require {
		return nil, errGossipUnlabelled
	}
	if b[0] != gossipEncryptMsg {
		// The gossip key is required, and memberlist refuses unencrypted
		// streams (GossipVerifyIncoming); refused here before it reads.
		return nil, errGossipNotEncrypted
	}
	if _, err := io.ReadFull(r, b[1:5]); err != nil {
		return nil, err
	}
	if binary.BigEndian.Uint32(b[1:5]) > maxGossipStreamBytes {
		return nil, errGossipTooLong
	}
	return b[:], nil
}

// replayConn returns pre before reading on.
type replayConn struct {
	*connlimit.Conn
	pre []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pre) > 0 {
		n := copy(p, c.pre)
		c.pre = c.pre[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// acceptPackets passes on the packets whose label the mode accepts,
// without the label header.
func (t *boundTransport) acceptPackets() {
	in := t.NetTransport.PacketCh()
	for {
		select {
		case p := <-in:
			if !t.admitPacket(p) {
				continue
			}
			select {
			case t.packets <- p:
			case <-t.stopping: // dropped: the transport is stopping
			}
		case <-t.done:
			return
		}
	}
}

// admitPacket strips p's label header, or reports that p is refused.
func (t *boundTransport) admitPacket(p *memberlist.Packet) bool {
	buf := p.Buf
	var err error
	switch {
	case len(buf) > 0 && buf[0] == gossipHasLabelMsg:
		if len(buf) < 2 || len(buf) < 2+int(buf[1]) || string(buf[2:2+int(buf[1])]) != gossipLabel {
			err = errGossipForeignLabel
		} else {
			p.Buf = buf[2+int(buf[1]):]
		}
	case t.require:
		err = errGossipUnlabelled
	}
	if err == nil {
		return true
	}
	t.refusedPackets.Add(1)
	pl := &t.packetLog
	pl.Lock()
	pl.pending++
	now := time.Now()
	if !pl.last.IsZero() && now.Sub(pl.last) < gossipRefusalLogEvery {
		pl.Unlock()
		return false
	}
	n := pl.pending
	pl.last, pl.pending = now, 0
	pl.Unlock()
	t.logger.Warn("refused gossip packets (counts since the last such line)", "refused", n,
		"reason", strings.Replace(err.Error(), "stream", "packet", 1), "last_source", p.From.String(), "interval", gossipRefusalLogEvery)
	return false
}

// newBoundTransport does what memberlist.Create does when Config.Transport
// is nil (including its retries when the port is chosen by the kernel, and
// writing that port back into mc), but returns a boundTransport whose
// inbound streams go through conns and whose label use follows mode.
func newBoundTransport(mc *memberlist.Config, logger *log.Logger, conns *connlimit.Limiter, mode GossipLabelMode, slogger *slog.Logger) (*boundTransport, error) {
	send, err := mode.sends()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidConfig, err)
	}
	nc := &memberlist.NetTransportConfig{
		BindAddrs:    []string{mc.BindAddr},
		BindPort:     mc.BindPort,
		Logger:       logger,
		MetricLabels: mc.MetricLabels,
	}
	limit := 1
	if mc.BindPort == 0 {
		// Binding TCP and UDP to one kernel-chosen port races other
		// processes; memberlist retries the same way.
		limit = 10
	}
	for range limit {
		var nt *memberlist.NetTransport
		if nt, err = memberlist.NewNetTransport(nc); err == nil {
			if mc.BindPort == 0 {
				mc.BindPort = nt.GetAutoBindPort()
				mc.AdvertisePort = mc.BindPort
			}
			if slogger == nil {
				slogger = slog.New(slog.DiscardHandler)
			}
			t := &boundTransport{
				NetTransport: nt, bind: mc.BindAddr, conns: conns,
				send: send, require: mode == GossipLabelRequire, logger: slogger,
				streams: make(chan net.Conn), packets: make(chan *memberlist.Packet), stopping: make(chan struct{}), done: make(chan struct{}),
			}
			go t.acceptStreams()
			go t.acceptPackets()
			return t, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, fmt.Errorf("gossip transport on %s: %w", net.JoinHostPort(mc.BindAddr, fmt.Sprint(mc.BindPort)), err)
}
