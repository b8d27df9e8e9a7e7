package faultproxy

import (
	"net"
	"sync"
	"time"
)

// Rule is what happens to traffic from one source IP. The zero Rule lets
// everything through at once. See the package doc for what each field
// means to raft and gossip.
type Rule struct {
	// Drop cuts the source off in both directions.
	Drop bool
	// Delay is added to every chunk (TCP) or packet (UDP), both directions.
	Delay time.Duration
	// DropInbound loses only what the source sends to the node.
	DropInbound bool
	// DropOutbound loses only what the node sends back to the source.
	DropOutbound bool
}

func (r Rule) dropsIn() bool  { return r.Drop || r.DropInbound }
func (r Rule) dropsOut() bool { return r.Drop || r.DropOutbound }

// drops reports whether the rule drops direction out (true) or in (false).
func (r Rule) drops(out bool) bool {
	if out {
		return r.dropsOut()
	}
	return r.dropsIn()
}

// ruleSet is the rules of one proxy. Waiters block on changed, which is
// closed and replaced on every change, so a stalled connection wakes the
// moment its rule is lifted.
type ruleSet struct {
	mu      sync.Mutex
	m       map[string]Rule
	changed chan struct{}
}

func (s *ruleSet) init() {
	s.m = map[string]Rule{}
	s.changed = make(chan struct{})
}

// normalIP is ip in one spelling (::ffff:127.0.0.1 is 127.0.0.1), so a
// rule set for "127.0.0.11" matches the address a socket reports. A
// string that is no IP is kept as it is (it matches nothing).
func normalIP(ip string) string {
	if p := net.ParseIP(ip); p != nil {
		return p.String()
	}
	return ip
}

// get is the rule for ip, and a channel closed on the next change.
func (s *ruleSet) get(ip string) (Rule, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[ip], s.changed
}

func (s *ruleSet) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// SetRule sets the rule for traffic from fromIP, replacing any earlier
// one; the zero Rule removes it. It applies at once to established
// connections too.
func (s *ruleSet) SetRule(fromIP string, r Rule) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r == (Rule{}) {
		delete(s.m, normalIP(fromIP))
	} else {
		s.m[normalIP(fromIP)] = r
	}
	s.notifyLocked()
}

// ClearRules removes every rule: all held traffic flows again.
func (s *ruleSet) ClearRules() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.m)
	s.notifyLocked()
}

// sourceIP is the normalised IP of a socket address.
func sourceIP(a net.Addr) string {
	switch a := a.(type) {
	case *net.TCPAddr:
		return a.IP.String()
	case *net.UDPAddr:
		return a.IP.String()
	}
	h, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return normalIP(h)
}
