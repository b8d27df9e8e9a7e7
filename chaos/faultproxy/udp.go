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

// Limits of one UDP relay.
const (
	// MaxSessions bounds the source addresses a UDP relay serves at once;
	// packets from more are dropped until one expires.
	MaxSessions = 256
	// SessionIdle is how long a session lives without traffic either way.
	SessionIdle = time.Minute
	// maxDelayed bounds the delayed packets in flight; more are dropped.
	maxDelayed = 1024
	maxPacket  = 64 << 10
)

// UDPStats are a UDP relay's counters since it started.
type UDPStats struct {
	PacketsIn   uint64 // delivered source → node
	PacketsOut  uint64 // delivered node → source
	DroppedIn   uint64 // source → node, lost to a rule or a limit
	DroppedOut  uint64 // node → source, lost to a rule or a limit
	Sessions    uint64 // sessions opened
	BytesIn     uint64
	BytesOut    uint64
	SendErrs    uint64 // packets the kernel refused to send
	SessionErrs uint64 // sessions that could not be opened
}

// UDP is a fault-injecting UDP relay in front of one node's port: each
// source address gets its own socket towards the node (bound to the
// source's IP where dialsrc allows), whose replies are sent back to the
// source from the relay's address.
type UDP struct {
	ruleSet
	ln     *net.UDPConn
	target *net.UDPAddr

	closed    chan struct{}
	closeOnce sync.Once
	wg        sync.WaitGroup
	delayed   chan struct{} // semaphore of delayed packets in flight

	mu       sync.Mutex
	sessions map[string]*session

	packetsIn, packetsOut, droppedIn, droppedOut atomic.Uint64
	bytesIn, bytesOut, sessionsOpened            atomic.Uint64
	sendErrs, sessionErrs                        atomic.Uint64
}

type session struct {
	src  *net.UDPAddr
	ip   string
	conn *net.UDPConn // connected to the node
	last atomic.Int64 // unix nanoseconds of the last packet either way
}

// ListenUDP listens on listen (ip:port) and relays every source's packets
// to target, and the node's replies back. It serves until Close.
func ListenUDP(listen, target string) (*UDP, error) {
	ta, err := net.ResolveUDPAddr("udp", target)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: target %q: %w", target, err)
	}
	la, err := net.ResolveUDPAddr("udp", listen)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen %q: %w", listen, err)
	}
	ln, err := net.ListenUDP("udp", la)
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen %s: %w", listen, err)
	}
	u := &UDP{
		ln: ln, target: ta, closed: make(chan struct{}),
		delayed: make(chan struct{}, maxDelayed), sessions: map[string]*session{},
	}
	u.ruleSet.init()
	u.wg.Add(1)
	go u.readLoop()
	return u, nil
}

// Addr is the relay's listening address, the one the node advertises.
func (u *UDP) Addr() net.Addr { return u.ln.LocalAddr() }

// Stats reads the counters.
func (u *UDP) Stats() UDPStats {
	return UDPStats{
		PacketsIn: u.packetsIn.Load(), PacketsOut: u.packetsOut.Load(),
		DroppedIn: u.droppedIn.Load(), DroppedOut: u.droppedOut.Load(),
		Sessions: u.sessionsOpened.Load(), BytesIn: u.bytesIn.Load(), BytesOut: u.bytesOut.Load(),
		SendErrs: u.sendErrs.Load(), SessionErrs: u.sessionErrs.Load(),
	}
}

// Close stops relaying and returns once every goroutine of the relay has
// ended; delayed packets not yet sent are lost.
func (u *UDP) Close() error {
	err := ErrClosed
	u.closeOnce.Do(func() {
		close(u.closed)
		err = u.ln.Close()
		u.mu.Lock()
		for _, s := range u.sessions {
			_ = s.conn.Close()
		}
		u.mu.Unlock()
		u.wg.Wait()
	})
	return err
}

func (u *UDP) readLoop() {
	defer u.wg.Done()
	buf := make([]byte, maxPacket)
	for {
		n, src, err := u.ln.ReadFromUDP(buf)
		if err != nil {
			select {
			case <-u.closed:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select { // a transient error: back off a little
			case <-time.After(10 * time.Millisecond):
			case <-u.closed:
				return
			}
			continue
		}
		ip := sourceIP(src)
		r, _ := u.get(ip)
		if r.dropsIn() {
			u.droppedIn.Add(1)
			continue
		}
		s := u.session(src, ip)
		if s == nil {
			u.droppedIn.Add(1)
			continue
		}
		s.last.Store(time.Now().UnixNano())
		pkt := append([]byte(nil), buf[:n]...)
		u.send(r.Delay, &u.droppedIn, func() {
			if _, err := s.conn.Write(pkt); err != nil {
				u.sendErrs.Add(1)
				return
			}
			u.packetsIn.Add(1)
			u.bytesIn.Add(uint64(len(pkt)))
		})
	}
}

// session is src's session, opened on its first packet; nil when the
// relay is closed, full, or the socket cannot be opened.
func (u *UDP) session(src *net.UDPAddr, ip string) *session {
	key := src.String()
	u.mu.Lock()
	defer u.mu.Unlock()
	if s, ok := u.sessions[key]; ok {
		return s
	}
	select {
	case <-u.closed:
		return nil
	default:
	}
	if len(u.sessions) >= MaxSessions {
		return nil
	}
	var laddr *net.UDPAddr
	if la := dialsrc.LocalAddr(ip, u.target.String()); la != nil {
		laddr = &net.UDPAddr{IP: la.IP}
	}
	conn, err := net.DialUDP("udp", laddr, u.target)
	if err != nil && laddr != nil {
		conn, err = net.DialUDP("udp", nil, u.target)
	}
	if err != nil {
		u.sessionErrs.Add(1)
		return nil
	}
	s := &session{src: src, ip: ip, conn: conn}
	s.last.Store(time.Now().UnixNano())
	u.sessions[key] = s
	u.sessionsOpened.Add(1)
	u.wg.Add(1)
	go u.replies(key, s)
	return s
}

// replies relays the node's packets on s back to its source until the
// session has been idle for SessionIdle or the relay closes.
func (u *UDP) replies(key string, s *session) {
	defer u.wg.Done()
	defer func() {
		u.mu.Lock()
		if u.sessions[key] == s {
			delete(u.sessions, key)
		}
		u.mu.Unlock()
		_ = s.conn.Close()
	}()
	buf := make([]byte, maxPacket)
	for {
		_ = s.conn.SetReadDeadline(time.Now().Add(SessionIdle))
		n, err := s.conn.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, s.last.Load())) < SessionIdle {
				continue // the source spoke recently
			}
			select {
			case <-u.closed:
				return
			default:
			}
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, net.ErrClosed) {
				return
			}
			// ICMP port unreachable (the node is down) surfaces here as
			// "connection refused": keep the session, the node may return.
			select {
			case <-time.After(10 * time.Millisecond):
			case <-u.closed:
				return
			}
			continue
		}
		s.last.Store(time.Now().UnixNano())
		r, _ := u.get(s.ip)
		if r.dropsOut() {
			u.droppedOut.Add(1)
			continue
		}
		pkt := append([]byte(nil), buf[:n]...)
		u.send(r.Delay, &u.droppedOut, func() {
			if _, err := u.ln.WriteToUDP(pkt, s.src); err != nil {
				u.sendErrs.Add(1)
				return
			}
			u.packetsOut.Add(1)
			u.bytesOut.Add(uint64(len(pkt)))
		})
	}
}

// send runs deliver now, or after delay on a goroutine of its own (at
// most maxDelayed at once; beyond that the packet counts in dropped).
func (u *UDP) send(delay time.Duration, dropped *atomic.Uint64, deliver func()) {
	if delay <= 0 {
		deliver()
		return
	}
	select {
	case u.delayed <- struct{}{}:
	default:
		dropped.Add(1)
		return
	}
	u.wg.Add(1)
	go func() {
		defer u.wg.Done()
		defer func() { <-u.delayed }()
		select {
		case <-time.After(delay):
			deliver()
		case <-u.closed:
		}
	}()
}
