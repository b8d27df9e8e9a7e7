package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// The internal RPC carries the few node-to-node calls raft does not:
// a follower asking the leader for a read index, bootstrap-expect asking
// peers whether they have raft state, Members collecting per-node stats,
// and removal of a server through the leader. It shares the raft listener
// and its mutual TLS (transport.go): a connection whose first byte is
// rpcMarker carries a sequence of requests, each answered before the next
// is read; requests and responses are frames of a 4-byte big-endian length
// and that many bytes of JSON, or, for proposals once every member reads
// version 2, of a binary form (rpcframe.go). Clients keep idle connections in a small
// pool per peer, so a follower's read-index round costs one round trip,
// not a TLS handshake. Every read and write has a deadline; a malformed
// frame closes the connection.

const (
	// rpcMarker selects the internal RPC on the raft port. Raft's own RPC
	// type bytes are 0..4.
	rpcMarker byte = 0xA7

	// rpcMaxFrame bounds a frame; requests and responses are tiny, but
	// for a proposal (Submit), whose request carries a whole command.
	rpcMaxFrame = 64 << 10
	// rpcMaxRequestFrame bounds a request frame: a proposal's command
	// holds one object, at most a few MiB (the API's object size limit,
	// kept in JSON as base64). Only a node certificate gets this far.
	rpcMaxRequestFrame = 32 << 20

	// rpcIOTimeout bounds reading a request and writing a response, and a
	// client call whose context has no deadline.
	rpcIOTimeout = 10 * time.Second

	// statsTimeout bounds each Stats call made by Members.
	statsTimeout = time.Second

	// rpcIdleTimeout closes a server-side connection that sends no request
	// for this long; rpcPoolIdle is the client's bound, kept shorter so the
	// client drops a connection before the server does.
	rpcIdleTimeout = 90 * time.Second
	rpcPoolIdle    = 60 * time.Second

	// rpcPoolSize bounds the idle connections kept per peer. A connection
	// carries one request at a time, and a follower executing writes
	// (Submit) has one proposal in flight per concurrent write: the pool
	// keeps that many connections open under load rather than paying a
	// TLS handshake per write.
	rpcPoolSize = 64
)

// RPC operations.
const (
	opReadIndex    = "read_index"
	opHasState     = "has_state"
	opStats        = "stats"
	opRemoveServer = "remove_server"
	opPropose      = "propose"
)

// RPCVersion is the newest version of the internal RPC this build reads
// and writes; it reads every version from 1. A JSON request carries its
// version in "v"; a request without one is version 1, which every build
// before the field wrote. A node refuses a newer version it cannot read
// with ErrUnsupportedVersion, naming both, rather than guess at fields it
// does not know; a build that changes what a request means must bump it,
// and send the new version only once every member reads it (the cluster
// version, formats.go; docs/OPERATIONS.md, Upgrading). Version 2 added
// binary proposal frames (rpcframe.go).
const RPCVersion = 2

// rpcJSONVersion is the version JSON requests say they are: version 2
// changed only proposals, which it sends in binary (rpcframe.go), so a
// JSON request means what it meant in version 1, and every build reads it.
const rpcJSONVersion = 1

type rpcRequest struct {
	// V is the request's version (RPCVersion); 0 is version 1.
	V    int    `json:"v,omitempty"`
	Op   string `json:"op"`
	Name string `json:"name,omitempty"`
	// Durable (remove_server): an operator asked for the removal, so the
	// leader records a removal marker that keeps the node out (removed.go);
	// a Leave sends false. No request skips the quorum check.
	Durable bool `json:"durable,omitempty"`
	// TimeoutMS is how long the caller will wait; the server stops
	// working on the request after it.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	// Commands (propose) are encoded fsm.Commands (submit.go).
	Commands commandList `json:"commands,omitempty"`
}

// binary says whether r goes as a binary frame (rpcframe.go): a proposal
// of version 2.
func (r *rpcRequest) binary() bool { return r.V == 2 && r.Op == opPropose }

type rpcResponse struct {
	Index    uint64 `json:"index,omitempty"`
	HasState bool   `json:"has_state,omitempty"`
	// Servers are the IDs in the node's latest configuration (has_state).
	Servers []string `json:"servers,omitempty"`
	// Leader: the answering node leads (has_state), so Servers is the
	// configuration the cluster acts on.
	Leader bool `json:"leader,omitempty"`
	// Name, Dir and Applied (has_state) are the answering node's name,
	// data directory identity (datadir.go) and applied index.
	Name    string `json:"name,omitempty"`
	Dir     string `json:"dir,omitempty"`
	Applied uint64 `json:"applied,omitempty"`
	// Replica (has_state): the answering node is a read replica
	// (Config.Replica), to be added as a non-voter and never promoted.
	Replica bool `json:"replica,omitempty"`
	// Proposals (propose) answer the request's Commands, in order.
	Proposals []proposalResult `json:"proposals,omitempty"`
	Stats     *nodeStats       `json:"stats,omitempty"`
	Code      string           `json:"code,omitempty"` // see errCodes
	Err       string           `json:"err,omitempty"`
}

// nodeStats is what Stats reports about a node.
type nodeStats struct {
	State         string `json:"state"`
	Applied       uint64 `json:"applied"`
	LastContactNS int64  `json:"last_contact_ns"` // -1: unknown
	// Features: Config.Features (older builds send none).
	Features []string `json:"features,omitempty"`
	// Facts: Config.Facts.
	Facts map[string]string `json:"facts,omitempty"`
	// Version: Config.Version (older builds send none).
	Version string `json:"version,omitempty"`
	// Formats: Config.Formats (older builds send none).
	Formats map[string]Reads `json:"formats,omitempty"`
}

// commandList is a proposal's commands in JSON (base64 strings), read
// with the count bounded as it goes: a frame of 32 MiB of empty strings
// would otherwise grow a slice of eleven million before the leader
// refused more than maxBatchCommands.
type commandList [][]byte

// UnmarshalJSON reads at most maxBatchCommands commands.
func (c *commandList) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		*c = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('[') {
		return fmt.Errorf("commands: not a list")
	}
	var out commandList
	for dec.More() {
		if len(out) == maxBatchCommands {
			return fmt.Errorf("more than %d commands in one proposal frame", maxBatchCommands)
		}
		var cmd []byte
		if err := dec.Decode(&cmd); err != nil {
			return fmt.Errorf("commands: %w", err)
		}
		out = append(out, cmd)
	}
	if _, err := dec.Token(); err != nil {
		return fmt.Errorf("commands: %w", err)
	}
	*c = out
	return nil
}

// errCodes carries sentinel errors across the wire.
var errCodes = []struct {
	code string
	err  error
}{
	{"not_leader", ErrNotLeader},
	{"no_leader", ErrNoLeader},
	{"timeout", ErrTimeout},
	{"leadership_lost", ErrLeadershipLost},
	{"shutdown", ErrShutdown},
	{"not_read_ready", ErrNotReadReady},
	{"unknown_member", ErrUnknownMember},
	{"no_quorum", ErrWouldLoseQuorum},
	{"invalid", ErrInvalidConfig},
	{"not_permitted", ErrNotPermitted},
	{"not_applied", ErrNotApplied},
	{"bad_request", errBadRequest},
	{"unsupported_version", ErrUnsupportedVersion},
}

func errCode(err error) string {
	for _, c := range errCodes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return ""
}

func codeErr(code string) error {
	for _, c := range errCodes {
		if c.code == code {
			return c.err
		}
	}
	return nil
}

// errBadRequest answers a request the server cannot parse or does not know.
var errBadRequest = errors.New("bad request")

// errUnsent: writing a request failed, so the server never read a whole
// frame and cannot have acted on it.
var errUnsent = errors.New("request not sent")

// writeFrame writes v as a JSON frame.
func writeFrame(w io.Writer, v any, limit int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return writeBinary(w, limit, len(b), func(buf []byte) []byte { return append(buf, b...) })
}

// writeBinary writes the frame whose payload build appends to its buffer
// (size bytes or so: the buffer's first capacity).
func writeBinary(w io.Writer, limit, size int, build func([]byte) []byte) error {
	buf := build(make([]byte, 4, 4+size))
	if len(buf)-4 > limit {
		return fmt.Errorf("frame of %d bytes exceeds %d", len(buf)-4, limit)
	}
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	_, err := w.Write(buf)
	return err
}

// readFrame reads a JSON frame into v.
func readFrame(r io.Reader, v any, limit int) error {
	b, err := readFrameBytes(r, limit)
	if err != nil {
		return err
	}
	return unmarshalFrame(b, v)
}

func unmarshalFrame(b []byte, v any) error {
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", errBadRequest, err)
	}
	return nil
}

// readFrameBytes reads one frame's payload, of 1 to limit bytes.
func readFrameBytes(r io.Reader, limit int) ([]byte, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(hdr[:])
	if size == 0 || uint64(size) > uint64(limit) {
		return nil, fmt.Errorf("%w: frame length %d", errBadRequest, size)
	}
	// The buffer grows as bytes arrive, so a length alone (four bytes
	// from a peer that sends nothing after them) holds no more than the
	// first chunk until the idle deadline.
	b := make([]byte, 0, min(int(size), frameChunk))
	for len(b) < int(size) {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(cap(b), int(size)-len(b)))
		}
		n, err := io.ReadFull(r, b[len(b):min(cap(b), int(size))])
		b = b[:len(b)+n]
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// frameChunk is what readFrameBytes holds for a frame before its bytes
// arrive; it doubles from there.
const frameChunk = 64 << 10

// readRequest reads one request: a JSON frame, or a binary proposal
// (rpcframe.go) when this node reads version 2. A node that reads
// version 1 only takes a binary frame for JSON and refuses it, as the
// builds before version 2 do.
func (n *Node) readRequest(r io.Reader) (rpcRequest, error) {
	b, err := readFrameBytes(r, rpcMaxRequestFrame)
	if err != nil {
		return rpcRequest{}, err
	}
	if b[0] == rpcBinary && n.rpcReads() >= 2 {
		req, err := parseProposeRequest(b)
		if err != nil {
			return rpcRequest{}, fmt.Errorf("%w: %w", errBadRequest, err)
		}
		return req, nil
	}
	var req rpcRequest
	return req, unmarshalFrame(b, &req)
}

// writeResponse answers req: a binary proposal's answer in binary, unless
// it carries an error; everything else in JSON.
func writeResponse(w io.Writer, req *rpcRequest, resp rpcResponse) error {
	if req.binary() && resp.Code == "" && resp.Err == "" {
		return writeBinary(w, rpcMaxFrame, 8+16*len(resp.Proposals), func(b []byte) []byte {
			return appendProposeAnswer(b, resp.Proposals)
		})
	}
	return writeFrame(w, resp, rpcMaxFrame)
}

// rpcReads is the newest internal-RPC version this node reads:
// RPCVersion, or less when Config.Formats says so (a node standing in for
// an older build, in tests).
func (n *Node) rpcReads() int {
	if r, ok := n.cfg.Formats[FormatRPC]; ok {
		return min(r.Max, RPCVersion)
	}
	return RPCVersion
}

// serveRPC answers requests on conn (the marker byte already read), one at
// a time, until the client closes it or stays idle for rpcIdleTimeout. It
// never panics on bad input: a frame it cannot read closes the connection,
// an unknown operation gets an error response.
//
// A node that shuts down closes its accepted connections at once: a
// caller's pooled connection must not go on reaching a stopped node's
// handler (in one process, a node restarted on the same address would
// otherwise answer through its predecessor).
func (n *Node) serveRPC(conn net.Conn) {
	defer conn.Close()
	stop := context.AfterFunc(n.ctx, func() { _ = conn.Close() })
	defer stop()
	caller, callerErr := n.rpcCaller(conn)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(rpcIdleTimeout))
		req, err := n.readRequest(conn)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				n.logger.Debug("internal RPC: unreadable request", "remote", conn.RemoteAddr(), "error", err)
			}
			if errors.Is(err, errBadRequest) {
				_ = conn.SetWriteDeadline(time.Now().Add(rpcIOTimeout))
				_ = writeFrame(conn, rpcResponse{Code: "bad_request", Err: err.Error()}, rpcMaxFrame)
			}
			return
		}
		if n.ctx.Err() != nil {
			// A node that is shutting down answers nothing: a peer asking
			// whether it is alive (voterHealth) must not hear yes. A
			// proposal hears that it was not taken, so its sender may
			// send it to the next leader instead of reporting an
			// unknown outcome.
			if req.Op == opPropose {
				_ = conn.SetWriteDeadline(time.Now().Add(rpcIOTimeout))
				_ = writeFrame(conn, rpcResponse{Code: errCode(ErrNotApplied), Err: "the node is shutting down; the proposal was not taken"}, rpcMaxFrame)
			}
			return
		}
		timeout := n.cfg.ApplyTimeout
		if req.TimeoutMS > 0 && time.Duration(req.TimeoutMS)*time.Millisecond < timeout {
			timeout = time.Duration(req.TimeoutMS) * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		resp := n.handleRPC(ctx, &req, caller, callerErr)
		cancel()
		_ = conn.SetWriteDeadline(time.Now().Add(rpcIOTimeout))
		if err := writeResponse(conn, &req, resp); err != nil {
			n.logger.Debug("internal RPC: writing response", "remote", conn.RemoteAddr(), "error", err)
			return
		}
	}
}

// rpcCaller names the node that opened conn, from its certificate.
func (n *Node) rpcCaller(conn net.Conn) (string, error) {
	if n.cfg.PeerName == nil {
		return "", errors.New("this node cannot identify RPC callers")
	}
	return n.cfg.PeerName(conn)
}

// handleRPC answers one request. caller is the calling node's name as its
// certificate proves it (callerErr when it proves none): a removal is
// honoured only for the caller itself.
func (n *Node) handleRPC(ctx context.Context, req *rpcRequest, caller string, callerErr error) rpcResponse {
	var (
		resp rpcResponse
		err  error
	)
	if req.V > n.rpcReads() {
		err := fmt.Errorf("%w: internal RPC request version %d, and this node reads up to version %d (it runs an older trustplane: upgrade it)", ErrUnsupportedVersion, req.V, n.rpcReads())
		return rpcResponse{Code: errCode(err), Err: err.Error()}
	}
	switch req.Op {
	case opReadIndex:
		resp.Index, err = n.leaderReadIndex(ctx)
	case opHasState:
		resp.HasState = n.hasState()
		resp.Leader = n.raft.State() == raft.Leader
		resp.Name, resp.Dir, resp.Applied, resp.Replica = n.cfg.NodeName, n.dataDir, n.fsm.AppliedIndex(), n.cfg.Replica
		if fut := n.raft.GetConfiguration(); fut.Error() == nil {
			for _, s := range fut.Configuration().Servers {
				resp.Servers = append(resp.Servers, string(s.ID))
			}
		}
	case opStats:
		s := n.localStats()
		resp.Stats = &s
	case opRemoveServer:
		switch {
		case callerErr != nil:
			err = fmt.Errorf("%w: %v", ErrNotPermitted, callerErr)
		case req.Name != caller:
			err = fmt.Errorf("%w: node %q asked to remove %q", ErrNotPermitted, caller, req.Name)
			n.logger.Warn("internal RPC: refused a removal of another node", "caller", caller, "target", req.Name)
		default:
			err = n.removeServerAsLeader(ctx, req.Name, req.Durable)
		}
	case opPropose:
		resp, err = n.serveProposals(ctx, req.Commands, caller, callerErr)
	default:
		return rpcResponse{Code: "bad_request", Err: fmt.Sprintf("unknown operation %q", req.Op)}
	}
	if err != nil {
		resp.Code, resp.Err = errCode(err), err.Error()
	}
	return resp
}

// call sends req to the node at addr (its raft address) and returns its
// response. Errors the remote node reported come back wrapping the same
// sentinel; a node that cannot be reached gives a plain error. It reuses a
// pooled connection when there is one; an idempotent request that fails on
// a reused connection (the peer may have closed it) is sent once more on a
// fresh one.
func (n *Node) call(ctx context.Context, addr raft.ServerAddress, req rpcRequest) (*rpcResponse, error) {
	if n.dialRPC == nil {
		return nil, errors.New("internal RPC is not available on this transport")
	}
	ctx, cancel := n.bind(ctx)
	defer cancel()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(rpcIOTimeout)
	}
	req.TimeoutMS = max(time.Until(deadline).Milliseconds(), 1)
	idempotent := req.Op != opRemoveServer && req.Op != opPropose
	for attempt := 0; ; attempt++ {
		conn, reused, err := n.rpcConn(ctx, addr)
		if err != nil {
			if ctx.Err() != nil {
				return nil, n.ctxErr(ctx)
			}
			return nil, err
		}
		resp, err := n.roundTrip(ctx, conn, deadline, addr, req)
		if err == nil {
			n.rpcPool.put(addr, conn)
			return n.remoteErr(resp, addr, req)
		}
		_ = conn.Close()
		if ctx.Err() != nil {
			return nil, n.ctxErr(ctx)
		}
		if !reused || !idempotent || attempt > 0 {
			return nil, err
		}
	}
}

// rpcConn returns a pooled connection to addr, or dials a new one. A
// pooled connection the peer has closed meanwhile is dropped unused
// (peerClosed), so that a request is never written where nobody reads it.
func (n *Node) rpcConn(ctx context.Context, addr raft.ServerAddress) (conn net.Conn, reused bool, err error) {
	for c := n.rpcPool.get(addr); c != nil; c = n.rpcPool.get(addr) {
		if !peerClosed(c) {
			return c, true, nil
		}
		_ = c.Close()
	}
	c, err := n.dialRPC(ctx, addr)
	return c, false, err
}

// roundTrip writes req and reads its response on conn within deadline.
func (n *Node) roundTrip(ctx context.Context, conn net.Conn, deadline time.Time, addr raft.ServerAddress, req rpcRequest) (*rpcResponse, error) {
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	_ = conn.SetDeadline(deadline)
	var err error
	if req.binary() {
		size := 16
		for _, c := range req.Commands {
			size += len(c) + 4
		}
		err = writeBinary(conn, rpcMaxRequestFrame, size, func(b []byte) []byte {
			return appendProposeRequest(b, req.TimeoutMS, req.Commands)
		})
	} else {
		req.V = rpcJSONVersion // every JSON request goes out here
		err = writeFrame(conn, req, rpcMaxRequestFrame)
	}
	if err != nil {
		return nil, fmt.Errorf("send %s to %s: %w: %w", req.Op, addr, errUnsent, err)
	}
	b, err := readFrameBytes(conn, rpcMaxFrame)
	var resp rpcResponse
	switch {
	case err != nil:
	case b[0] == rpcBinary && req.binary():
		resp, err = parseProposeAnswer(b)
	default:
		err = unmarshalFrame(b, &resp)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s response from %s: %w", req.Op, addr, err)
	}
	_ = conn.SetDeadline(time.Time{})
	return &resp, nil
}

// remoteErr turns an error the remote node reported into a Go error.
func (n *Node) remoteErr(resp *rpcResponse, addr raft.ServerAddress, req rpcRequest) (*rpcResponse, error) {
	if resp.Code != "" || resp.Err != "" {
		if s := codeErr(resp.Code); s != nil {
			return resp, fmt.Errorf("%w: %s answered: %s", s, addr, resp.Err)
		}
		return resp, fmt.Errorf("cluster: %s answered %s: %s", addr, req.Op, resp.Err)
	}
	return resp, nil
}

// rpcPool keeps a few idle internal-RPC connections per peer.
type rpcPool struct {
	mu     sync.Mutex
	idle   map[raft.ServerAddress][]pooledConn
	closed bool
}

type pooledConn struct {
	net.Conn
	since time.Time
}

// get returns an idle connection to addr that is young enough, or nil.
func (p *rpcPool) get(addr raft.ServerAddress) net.Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	for conns := p.idle[addr]; len(conns) > 0; conns = p.idle[addr] {
		c := conns[len(conns)-1]
		p.idle[addr] = conns[:len(conns)-1]
		if time.Since(c.since) < rpcPoolIdle {
			return c.Conn
		}
		_ = c.Close()
	}
	return nil
}

// put returns conn to the pool, or closes it when the pool is full or shut.
func (p *rpcPool) put(addr raft.ServerAddress, conn net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle[addr]) >= rpcPoolSize {
		_ = conn.Close()
		return
	}
	if p.idle == nil {
		p.idle = map[raft.ServerAddress][]pooledConn{}
	}
	p.idle[addr] = append(p.idle[addr], pooledConn{Conn: conn, since: time.Now()})
}

// drain closes every idle connection; the pool stays open.
func (p *rpcPool) drain() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, conns := range p.idle {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	p.idle = nil
}

// close closes every idle connection and refuses new ones.
func (p *rpcPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, conns := range p.idle {
		for _, c := range conns {
			_ = c.Close()
		}
	}
	p.idle = nil
}

// hasState reports whether this node has any raft state: log entries, a
// snapshot, or a configuration. Bootstrap-expect must not bootstrap when
// any peer does.
func (n *Node) hasState() bool {
	if n.raft.LastIndex() > 0 {
		return true
	}
	fut := n.raft.GetConfiguration()
	return fut.Error() == nil && len(fut.Configuration().Servers) > 0
}

// localStats is this node's answer to Stats.
func (n *Node) localStats() nodeStats {
	s := nodeStats{State: n.raft.State().String(), Applied: n.fsm.AppliedIndex(), LastContactNS: -1, Features: n.cfg.Features, Version: n.cfg.Version, Formats: n.cfg.Formats}
	if n.cfg.Facts != nil {
		s.Facts = n.cfg.Facts()
	}
	switch {
	case n.raft.State() == raft.Leader:
		s.LastContactNS = 0
	default:
		if lc := n.raft.LastContact(); !lc.IsZero() {
			s.LastContactNS = int64(time.Since(lc))
		}
	}
	return s
}
