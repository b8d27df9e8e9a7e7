package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// gossipWatch records, while a rotation runs, every member a node's
// gossip sees other than alive (/debug/trustplane/members): a rotation of
// the gossip key, or of the node CA whose certificates the nodes dial
// each other with, must not make a member flap.
type gossipWatch struct {
	stop chan struct{}
	done chan struct{}

	mu   sync.Mutex
	seen []flap
}

// flap is one member seen not alive by one node.
type flap struct{ observer, member, status string }

// watchGossip polls every node's member view every half second until the
// returned watch is stopped.
func (n *nemesis) watchGossip(ctx context.Context) *gossipWatch {
	g := &gossipWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(g.done)
		for {
			for _, name := range n.t.Names() {
				g.poll(ctx, n.t, name)
			}
			select {
			case <-ctx.Done():
				return
			case <-g.stop:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return g
}

func (g *gossipWatch) poll(ctx context.Context, t Target, name string) {
	cfg, err := t.Config(name)
	if err != nil {
		return
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return
	}
	defer hc.CloseIdleConnections()
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, cfg.Host+"/debug/trustplane/members", nil)
	if err != nil {
		return
	}
	resp, err := hc.Do(req)
	if err != nil {
		return // a node that does not answer says nothing of the others
	}
	defer resp.Body.Close()
	var ms []struct{ Name, Status string }
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&ms) != nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, m := range ms {
		if m.Status != "alive" {
			g.seen = append(g.seen, flap{observer: name, member: m.Name, status: m.Status})
		}
	}
}

// flaps stops the watch and describes what it saw, leaving out the node
// the rotation killed on purpose, as seen or as seer.
func (g *gossipWatch) flaps(killed string) []string {
	close(g.stop)
	<-g.done
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for _, f := range g.seen {
		if f.member == killed || f.observer == killed {
			continue
		}
		if s := fmt.Sprintf("%s saw %s %s", f.observer, f.member, f.status); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}
