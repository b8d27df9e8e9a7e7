package faultproxy

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trustplane/trustplane/dialsrc"
)

// Limits of one TCP proxy.
const (
	// MaxConns bounds the connections a TCP proxy holds (flowing, held
	// back or waiting at accept); more are closed at accept.
	MaxConns = 512
	// chunkSize is the most one read takes; chunksQueued bound the chunks
	// in flight per direction, so at most chunkSize*chunksQueued bytes per
	// direction sit in the proxy, the rest in the kernel's buffers.
	chunkSize    = 32 << 10
	chunksQueued = 16
	// dialTimeout bounds the dial to the node behind the proxy.
	dialTimeout = 10 * time.Second
)

// ErrClosed is returned by operations on a closed proxy.
var ErrClosed = errors.New("faultproxy: closed")

// TCPStats are a TCP proxy's counters since it started.
type TCPStats struct {
	Accepted uint64 // connections accepted
	Refused  uint64 // closed at accept: MaxConns reached
	Held     uint64 // connections that waited at accept for a drop rule to be lifted
	DialErrs uint64 // connections closed because the node could not be dialled
	BytesIn  uint64 // delivered source → node
	BytesOut uint64 // delivered node → source
	// HeldIn and HeldOut count chunks that a drop rule held back (each
	// once, however long it waited).
	HeldIn, HeldOut uint64
}

// TCP is a fault-injecting TCP proxy in front of one node's port.
type TCP struct {
	ruleSet
	ln     net.Listener
	target string

	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup

	mu    sync.Mutex
	conns map[*pair]struct{}

	accepted, refused, held, dialErrs atomic.Uint64
	bytesIn, bytesOut                 atomic.Uint64
	heldIn, heldOut                   atomic.Uint64
}

// ListenTCP listens on listen (host:port) and forwards every connection to
// target. It serves until Close.
func ListenTCP(listen, target string) (*TCP, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("faultproxy: target %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen %s: %w", listen, err)
	}
	t := &TCP{ln: ln, target: target, closed: make(chan struct{}), conns: map[*pair]struct{}{}}
	t.ruleSet.init()
	t.wg.Add(1)
	go t.acceptLoop()
	return t, nil
}

// Addr is the proxy's listening address, the one the node advertises.
func (t *TCP) Addr() net.Addr { return t.ln.Addr() }

// Stats reads the counters.
func (t *TCP) Stats() TCPStats {
	return TCPStats{
		Accepted: t.accepted.Load(), Refused: t.refused.Load(), Held: t.held.Load(), DialErrs: t.dialErrs.Load(),
		BytesIn: t.bytesIn.Load(), BytesOut: t.bytesOut.Load(), HeldIn: t.heldIn.Load(), HeldOut: t.heldOut.Load(),
	}
}

// Close stops accepting, closes every connection (held bytes are lost)
// and returns once every goroutine of the proxy has ended.
func (t *TCP) Close() error {
	err := ErrClosed
	t.closeOnce.Do(func() {
		close(t.closed)
		err = t.ln.Close()
		t.mu.Lock()
		for p := range t.conns {
			p.kill()
		}
		t.mu.Unlock()
		t.wg.Wait()
	})
	return err
}

func (t *TCP) acceptLoop() {
	defer t.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := t.ln.Accept()
		if err != nil {
			select {
			case <-t.closed:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select { // a transient error (out of descriptors): back off
			case <-time.After(backoff):
			case <-t.closed:
				return
			}
			backoff = min(2*backoff, time.Second)
			continue
		}
		backoff = 5 * time.Millisecond
		t.accepted.Add(1)
		p := &pair{client: c, src: sourceIP(c.RemoteAddr()), dead: make(chan struct{})}
		t.mu.Lock()
		select {
		case <-t.closed: // Close has already killed what it found
			t.mu.Unlock()
			_ = c.Close()
			return
		default:
		}
		full := len(t.conns) >= MaxConns
		if !full {
			t.conns[p] = struct{}{}
		}
		t.mu.Unlock()
		if full {
			t.refused.Add(1)
			_ = c.Close()
			continue
		}
		t.wg.Add(1)
		go t.serve(p)
	}
}

// pair is one proxied connection: client is the source's, node the one
// the proxy dialled.
type pair struct {
	client, node net.Conn
	src          string
	dead         chan struct{} // closed by kill
	killOnce     sync.Once
	mu           sync.Mutex // guards node while it is being dialled
}

// kill closes both ends, which ends both directions.
func (p *pair) kill() {
	p.killOnce.Do(func() {
		close(p.dead)
		_ = p.client.Close()
		p.mu.Lock()
		if p.node != nil {
			_ = p.node.Close()
		}
		p.mu.Unlock()
	})
}

// serve waits for the rule to allow a connection, dials the node and runs
// both directions until both have ended.
func (t *TCP) serve(p *pair) {
	defer t.wg.Done()
	defer func() {
		p.kill()
		t.mu.Lock()
		delete(t.conns, p)
		t.mu.Unlock()
	}()
	// A connection is established only when both directions pass.
	counted := false
	for {
		r, changed := t.get(p.src)
		if !r.dropsIn() && !r.dropsOut() {
			if r.Delay > 0 { // the handshake's latency
				select {
				case <-time.After(r.Delay):
				case <-p.dead:
					return
				}
			}
			break
		}
		if !counted {
			t.held.Add(1)
			counted = true
		}
		select {
		case <-changed:
		case <-p.dead:
			return
		}
	}
	d := net.Dialer{Timeout: dialTimeout}
	if la := dialsrc.LocalAddr(p.src, t.target); la != nil {
		d.LocalAddr = la
	}
	node, err := d.Dial("tcp", t.target)
	if err != nil {
		t.dialErrs.Add(1)
		return
	}
	p.mu.Lock()
	p.node = node
	p.mu.Unlock()
	select {
	case <-p.dead: // killed while dialling
		_ = node.Close()
		return
	default:
	}
	var dirs sync.WaitGroup
	dirs.Add(2)
	go func() { defer dirs.Done(); t.pipe(p, p.client, node, false) }()
	go func() { defer dirs.Done(); t.pipe(p, node, p.client, true) }()
	dirs.Wait()
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies one direction (out: node → source) through a bounded queue:
// a reader stamps each chunk with its due time, the writer delivers it
// then, unless a drop rule holds it back until lifted. At the reader's
// end of stream the writer half-closes dst once the queue is delivered;
// a failed write kills the pair.
func (t *TCP) pipe(p *pair, src, dst net.Conn, out bool) {
	q := make(chan chunk, chunksQueued)
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		defer close(q)
		for {
			b := make([]byte, chunkSize)
			n, err := src.Read(b)
			if n > 0 {
				r, _ := t.get(p.src)
				select {
				case q <- chunk{b: b[:n], due: time.Now().Add(r.Delay)}:
				case <-p.dead:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	bytes, heldCount := &t.bytesIn, &t.heldIn
	if out {
		bytes, heldCount = &t.bytesOut, &t.heldOut
	}
	for c := range q {
		if wait := time.Until(c.due); wait > 0 {
			select {
			case <-time.After(wait):
			case <-p.dead:
				return
			}
		}
		counted := false
		for {
			r, changed := t.get(p.src)
			if !r.drops(out) {
				break
			}
			if !counted {
				heldCount.Add(1)
				counted = true
			}
			select {
			case <-changed:
			case <-p.dead:
				return
			}
		}
		if _, err := dst.Write(c.b); err != nil {
			p.kill()
			return
		}
		bytes.Add(uint64(len(c.b)))
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}
