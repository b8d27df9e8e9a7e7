package storage

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/internal/memlog"
)

// ttlEnv is a storage layer over a one-voter log with one resource that
// has a TTL (events) and one that has none (configmaps), and a term of its
// Expiry on a fake clock. The term is driven step by step (follow, due,
// expire), as Run drives it, so the rules are checked without goroutines
// or sleeps.
type ttlEnv struct {
	t     *testing.T
	log   *memlog.Log
	clock *clocktesting.FakeClock
	exp   *Expiry
}

const testTTL = time.Hour

func newTTLEnv(t *testing.T) *ttlEnv {
	t.Helper()
	l := memlog.New()
	stor, err := New(&Config{FreshWait: 10 * time.Millisecond, Feed: l.FSM}, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stor.Close)
	events := schema.GroupVersionResource{Version: "v1", Resource: "events"}
	stor.MustForResource(t, ResourceConfig{GVR: events, TTL: testTTL})
	// A second resource over the same objects, as events.k8s.io/v1 events
	// are: it shares the first one's TTL.
	stor.MustForResource(t, ResourceConfig{GVR: schema.GroupVersionResource{Group: "events.k8s.io", Version: "v1", Resource: "events"},
		Stored: events.GroupResource(), TTL: testTTL})
	stor.MustForResource(t, ResourceConfig{GVR: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}})
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return &ttlEnv{t: t, log: l, clock: clk, exp: stor.Expiry(clk)}
}

func evKey(name string) fsm.Key { return fsm.Key{Resource: "events", Namespace: "ns", Name: name} }

func (e *ttlEnv) put(k fsm.Key) uint64 {
	e.t.Helper()
	res, err := e.log.Propose(context.Background(), &fsm.Command{Op: fsm.OpPut, Key: k, Value: []byte("v")})
	if err != nil || res.Err != nil {
		e.t.Fatalf("put %v: %v %v", k, err, res)
	}
	return res.Revision
}

func (e *ttlEnv) exists(k fsm.Key) bool {
	kv, _, err := e.log.Get(k, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return kv != nil
}

func (e *ttlEnv) term() *expiryTerm {
	e.t.Helper()
	e.exp.s.mu.RLock()
	ttls := map[schema.GroupResource]time.Duration{}
	for gr, ttl := range e.exp.s.ttls {
		ttls[gr] = ttl
	}
	e.exp.s.mu.RUnlock()
	t, stop, err := e.exp.start(ttls)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(stop)
	return t
}

// tick takes in the applied changes at once, as Run does when the
// stream wakes it, moves the clock by d and deletes what is then due.
func (e *ttlEnv) tick(t *expiryTerm, d time.Duration) {
	t.follow()
	e.clock.Step(d)
	t.follow()
	now := e.clock.Now()
	for due := t.due(now); len(due) > 0; due = t.due(now) {
		t.expire(context.Background(), due, now)
		t.follow()
	}
}

func TestExpiryDeletesTTLAfterTheLastWrite(t *testing.T) {
	e := newTTLEnv(t)
	term := e.term()
	e.put(evKey("old"))
	e.put(evKey("rewritten"))
	cm := fsm.Key{Resource: "configmaps", Namespace: "ns", Name: "kept"}
	e.put(cm)
	e.tick(term, 0)

	e.tick(term, testTTL/2)
	e.put(evKey("rewritten")) // a new write starts a new TTL
	e.tick(term, testTTL/2-time.Second)
	if !e.exists(evKey("old")) {
		t.Fatal("an event was deleted before its TTL passed")
	}
	e.tick(term, time.Second)
	if e.exists(evKey("old")) {
		t.Fatal("an event outlived its TTL")
	}
	if !e.exists(evKey("rewritten")) {
		t.Fatal("an event written again was deleted TTL after its first write")
	}
	if !e.exists(cm) {
		t.Fatal("an object of a resource without a TTL was deleted")
	}
	e.tick(term, testTTL/2)
	if e.exists(evKey("rewritten")) {
		t.Fatal("an event outlived the TTL of its last write")
	}
	if !e.exists(cm) {
		t.Fatal("an object of a resource without a TTL was deleted")
	}
}

func TestExpiryNewTermGivesAFullTTL(t *testing.T) {
	e := newTTLEnv(t)
	first := e.term()
	e.put(evKey("a"))
	e.tick(first, testTTL-time.Minute)

	// Another leader (or this one after a restart) knows nothing of when
	// "a" was written: it gives it a full TTL from its own start, as etcd
	// refreshes its leases when its leader changes. It never expires an
	// object early.
	second := e.term()
	e.tick(second, 2*time.Minute)
	if !e.exists(evKey("a")) {
		t.Fatal("a new term expired an event before a full TTL of its own")
	}
	e.tick(second, testTTL)
	if e.exists(evKey("a")) {
		t.Fatal("an event outlived a new term's TTL")
	}
}

func TestExpiryDeleteIsGuardedByTheExpiredVersion(t *testing.T) {
	e := newTTLEnv(t)
	term := e.term()
	rev := e.put(evKey("a"))
	e.tick(term, 0)
	// The object is written again after the term took its last change in
	// but before the term deletes: the delete carries the expired version
	// as its precondition, so the new write survives.
	e.clock.Step(testTTL)
	e.put(evKey("a"))
	due := term.due(e.clock.Now())
	if len(due) != 1 || due[0].rev != rev {
		t.Fatalf("due = %+v, want the version at %d", due, rev)
	}
	term.expire(context.Background(), due, e.clock.Now())
	if !e.exists(evKey("a")) {
		t.Fatal("an expiry deleted a newer write")
	}
}

func TestExpiryFeedKeepsOnlyResourcesWithATTL(t *testing.T) {
	e := newTTLEnv(t)
	term := e.term()
	e.put(fsm.Key{Resource: "configmaps", Namespace: "ns", Name: "x"})
	e.put(evKey("e"))
	if got := len(term.feed.take()); got != 1 {
		t.Fatalf("the term queued %d changes, want only the event's", got)
	}
}
