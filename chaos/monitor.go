package chaos

import (
	"context"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// monitor follows who leads, by asking every node's raft status, so
// that faults can aim at the leader and the report can count leader
// changes as a client sees them.
type monitor struct {
	names   []string
	clients []*http.Client
	hosts   []string

	mu      sync.Mutex
	leader  string
	changes int
	// firstTerm is the highest raft term at the first poll, maxTerm the
	// highest seen since.
	firstTerm, maxTerm uint64
}

func newMonitor(t Target) (*monitor, error) {
	m := &monitor{names: t.Names()}
	for _, n := range m.names {
		cfg, err := followConfig(t, n)
		if err != nil {
			return nil, err
		}
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return nil, err
		}
		hc.Timeout = 2 * time.Second
		m.clients = append(m.clients, hc)
		m.hosts = append(m.hosts, cfg.Host)
	}
	return m, nil
}

// ask returns the leader's name (see poll).
func (m *monitor) ask() string {
	l, _ := m.poll()
	return l.Node
}

// poll asks every node's /debug/trustplane/raft and returns the status of
// the node that says it leads at the highest term among those that answer
// (ok false when none does). It also keeps the highest term seen, whose
// rise counts elections even when the leader changed and changed back
// between two polls.
func (m *monitor) poll() (leader raftIndexes, ok bool) {
	for i := range m.clients {
		st, err := m.indexes(i)
		if err != nil {
			continue
		}
		m.mu.Lock()
		m.maxTerm = max(m.maxTerm, st.Term)
		m.mu.Unlock()
		if st.State == "Leader" && (!ok || st.Term >= leader.Term) {
			leader, ok = st, true
		}
	}
	return leader, ok
}

func (m *monitor) run(ctx context.Context) {
	for ctx.Err() == nil {
		l := m.ask()
		m.mu.Lock()
		if m.firstTerm == 0 {
			m.firstTerm = m.maxTerm
		}
		m.mu.Unlock()
		if l != "" {
			m.mu.Lock()
			if m.leader != "" && l != m.leader {
				m.changes++
			}
			m.leader = l
			m.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Leader is the last leader seen ("" before any).
func (m *monitor) Leader() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.leader
}

// Changes is how many times the leader seen changed.
func (m *monitor) Changes() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.changes
}

// TermRise is how much the highest term rose over the run: one per
// election round, won or not.
func (m *monitor) TermRise() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return int(m.maxTerm - m.firstTerm)
}

// term asks now and returns the highest raft term seen so far.
func (m *monitor) term() uint64 {
	m.ask()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.maxTerm
}

// currentLeader asks now, falling back to the last one seen.
func (m *monitor) currentLeader() string {
	if l := m.ask(); l != "" {
		return l
	}
	return m.Leader()
}
