package chaos

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// monitor follows who leads, by asking the nodes' members endpoint, so
// that faults can aim at the leader and the report can count leader
// changes as a client sees them.
type monitor struct {
	names   []string
	clients []*http.Client
	hosts   []string

	mu      sync.Mutex
	leader  string
	changes int
}

func newMonitor(t Target) (*monitor, error) {
	m := &monitor{names: t.Names()}
	for _, n := range m.names {
		cfg, err := t.Config(n)
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

// ask returns the leader's name as the first node that answers sees it.
func (m *monitor) ask() string {
	for i, hc := range m.clients {
		resp, err := hc.Get(m.hosts[i] + "/debug/trustplane/members")
		if err != nil {
			continue
		}
		var members []struct {
			Name      string `json:"name"`
			RaftState string `json:"raftState"`
		}
		err = json.NewDecoder(resp.Body).Decode(&members)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			continue
		}
		for _, mb := range members {
			if mb.RaftState == "Leader" {
				return mb.Name
			}
		}
	}
	return ""
}

func (m *monitor) run(ctx context.Context) {
	for ctx.Err() == nil {
		if l := m.ask(); l != "" {
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

// currentLeader asks now, falling back to the last one seen.
func (m *monitor) currentLeader() string {
	if l := m.ask(); l != "" {
		return l
	}
	return m.Leader()
}
