package authn_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/trustplane/trustplane/api/authn"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

// laggingLog is a node that has applied nothing yet: it reads the keys
// only once caught up.
type laggingLog struct {
	*localLog
	caughtUp atomic.Bool
}

func (l *laggingLog) List(p fsm.Prefix, opts fsm.ListOptions) (fsm.ListResult, error) {
	if !l.caughtUp.Load() {
		return fsm.ListResult{}, nil
	}
	return l.localLog.List(p, opts)
}

// A node that does not hold a token's key id yet catches up with the
// cluster once and looks again, instead of refusing a token another node
// already signs with a new key; a key id nobody holds is still refused.
func TestUnknownKeyIDCatchesUp(t *testing.T) {
	ctx := context.Background()
	l := newLocalLog()
	leader := authn.NewKeyStore(l, nil, storage.AtRest{})
	if err := leader.EnsureKey(ctx); err != nil {
		t.Fatal(err)
	}
	keys := leader.PublicKeys().GetPublicKeys(ctx, "")
	if len(keys) != 1 {
		t.Fatalf("the leader holds %d keys", len(keys))
	}
	kid := keys[0].KeyID

	for _, withCatchUp := range []bool{false, true} {
		lag := &laggingLog{localLog: l}
		follower := authn.NewKeyStore(lag, nil, storage.AtRest{})
		catchUps := 0
		if withCatchUp {
			follower.SetCatchUp(func(context.Context) error { catchUps++; lag.caughtUp.Store(true); return nil })
		}
		got := follower.PublicKeys().GetPublicKeys(ctx, kid)
		if withCatchUp != (len(got) == 1) {
			t.Fatalf("catch-up %v: the lagging node found %d keys for %s", withCatchUp, len(got), kid)
		}
		if withCatchUp {
			if got := follower.PublicKeys().GetPublicKeys(ctx, "no-such-kid"); len(got) != 0 || catchUps != 2 {
				t.Fatalf("an unknown key id: %d keys after %d catch-ups", len(got), catchUps)
			}
		}
	}
}

// staleLog is a node that has applied the log only up to at (a node
// restarted from an old snapshot, replaying): it reads the keys as of at
// until caught up.
type staleLog struct {
	*localLog
	at       uint64
	caughtUp atomic.Bool
}

func (l *staleLog) List(p fsm.Prefix, opts fsm.ListOptions) (fsm.ListResult, error) {
	if !l.caughtUp.Load() {
		opts.Revision = l.at
	}
	return l.localLog.List(p, opts)
}

// TestJWKSCatchesUpWhenStale: a node within the staleness bound serves
// the JWKS from its own keys; one outside it serves the JWKS only after a
// catch-up, so it never publishes a key set without the key the cluster
// signs with, and answers 503 with Retry-After when it cannot catch up.
func TestJWKSCatchesUpWhenStale(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	before := w.log.AppliedIndex()
	kid, err := w.keys.Rotate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name       string
		fresh      bool
		catchUpErr error
		wantCode   int
		wantNewKid bool
		catchUps   int
	}{
		{name: "fresh serves its own keys", fresh: true, wantCode: http.StatusOK, wantNewKid: false, catchUps: 0},
		{name: "stale catches up first", fresh: false, wantCode: http.StatusOK, wantNewKid: true, catchUps: 1},
		{name: "stale and cut off", fresh: false, catchUpErr: errors.New("no leader"), wantCode: http.StatusServiceUnavailable, catchUps: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stale := &staleLog{localLog: w.log, at: before}
			keys := authn.NewKeyStore(stale, nil, storage.AtRest{})
			catchUps := 0
			keys.SetCatchUp(func(context.Context) error {
				catchUps++
				if tc.catchUpErr != nil {
					return tc.catchUpErr
				}
				stale.caughtUp.Store(true)
				return nil
			})
			keys.SetFresh(func() bool { return tc.fresh })
			cfg := authn.DefaultConfig()
			cfg.ExternalAddress = "127.0.0.1:6443"
			id, err := authn.New(cfg, keys, w.reg)
			if err != nil {
				t.Fatal(err)
			}
			rec := httptest.NewRecorder()
			id.Paths[serviceaccount.JWKSPath].ServeHTTP(rec, httptest.NewRequest(http.MethodGet, serviceaccount.JWKSPath, nil))
			if rec.Code != tc.wantCode || catchUps != tc.catchUps {
				t.Fatalf("%d after %d catch-ups (want %d after %d): %s", rec.Code, catchUps, tc.wantCode, tc.catchUps, rec.Body)
			}
			if rec.Code != http.StatusOK {
				if rec.Header().Get("Retry-After") != "1" || !strings.Contains(rec.Body.String(), "has not caught up") {
					t.Fatalf("the refusal: Retry-After %q, %s", rec.Header().Get("Retry-After"), rec.Body)
				}
				return
			}
			if got := strings.Contains(rec.Body.String(), kid); got != tc.wantNewKid {
				t.Fatalf("the new key %s listed: %v, want %v: %s", kid, got, tc.wantNewKid, rec.Body)
			}
		})
	}
}

// TestJWKSStaleRequestsShareOneCatchUp: on a stale node a burst of JWKS
// requests (anyone the discovery role admits may send them) costs one
// catch-up, not one read index each.
func TestJWKSStaleRequestsShareOneCatchUp(t *testing.T) {
	w := newWorld(t, nil)
	stale := &staleLog{localLog: w.log, at: w.log.AppliedIndex()}
	keys := authn.NewKeyStore(stale, nil, storage.AtRest{})
	var catchUps atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	keys.SetCatchUp(func(context.Context) error {
		if catchUps.Add(1) == 1 {
			close(started)
		}
		<-release
		stale.caughtUp.Store(true)
		return nil
	})
	keys.SetFresh(func() bool { return false })
	cfg := authn.DefaultConfig()
	cfg.ExternalAddress = "127.0.0.1:6443"
	id, err := authn.New(cfg, keys, w.reg)
	if err != nil {
		t.Fatal(err)
	}
	const burst = 20
	codes := make(chan int, burst)
	for range burst {
		go func() {
			rec := httptest.NewRecorder()
			id.Paths[serviceaccount.JWKSPath].ServeHTTP(rec, httptest.NewRequest(http.MethodGet, serviceaccount.JWKSPath, nil))
			codes <- rec.Code
		}()
	}
	<-started
	time.Sleep(100 * time.Millisecond) // let the rest of the burst join the catch-up under way
	close(release)
	for range burst {
		if code := <-codes; code != http.StatusOK {
			t.Fatalf("a request of the burst: %d", code)
		}
	}
	// The burst joins the first catch-up; a request that reached it only
	// after it finished (a slow scheduler) starts another, never one each.
	if n := catchUps.Load(); n > burst/4 {
		t.Fatalf("%d requests cost %d catch-ups", burst, n)
	}
}
