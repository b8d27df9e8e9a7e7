package authn_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

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
		// apiCaughtUp: the API caught the request up already
		// (authn.WithCaughtUp), as its own catch-up would leave the log.
		apiCaughtUp bool
	}{
		{name: "fresh serves its own keys", fresh: true, wantCode: http.StatusOK, wantNewKid: false, catchUps: 0},
		{name: "stale catches up first", fresh: false, wantCode: http.StatusOK, wantNewKid: true, catchUps: 1},
		{name: "stale and cut off", fresh: false, catchUpErr: errors.New("no leader"), wantCode: http.StatusServiceUnavailable, catchUps: 1},
		{name: "stale, the request caught up by the API: not again", fresh: false, apiCaughtUp: true, wantCode: http.StatusOK, wantNewKid: true, catchUps: 0},
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
			req := httptest.NewRequest(http.MethodGet, serviceaccount.JWKSPath, nil)
			if tc.apiCaughtUp {
				stale.caughtUp.Store(true)
				req = req.WithContext(authn.WithCaughtUp(req.Context()))
			}
			rec := httptest.NewRecorder()
			id.Paths[serviceaccount.JWKSPath].ServeHTTP(rec, req)
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

// TestStaleCallersNeverJoinAStartedCatchUp: on a stale node every caller
// waits for a catch-up of its own, started after it arrived (the cluster's
// read index shares rounds that way: cluster.TestReadIndexNeverReusesStartedRound).
// Joining one already under way (the red team's finding, 2026-12-04) let a
// token presented after its key's retirement be verified against a read
// index taken before it, and let the first caller's cancelled context fail
// everyone waiting with it.
func TestStaleCallersNeverJoinAStartedCatchUp(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t, nil)
	sa := w.serviceAccount("default", "app")
	old := mint(t, w.id.Tokens, sa, nil, nil, []string{authn.DefaultIssuer}, nil)
	if _, err := w.keys.Rotate(ctx); err != nil {
		t.Fatal(err)
	}
	stale := &staleLog{localLog: w.log, at: w.log.AppliedIndex()}
	keys := authn.NewKeyStore(stale, nil, storage.AtRest{})
	var calls atomic.Int32
	firstStarted := make(chan struct{})
	keys.SetCatchUp(func(cctx context.Context) error {
		if calls.Add(1) == 1 {
			// The first caller's catch-up: its read index was taken
			// before the retirement below, and it never completes.
			close(firstStarted)
			<-cctx.Done()
			return cctx.Err()
		}
		stale.caughtUp.Store(true)
		return nil
	})
	keys.SetFresh(func() bool { return false })
	cfg := authn.DefaultConfig()
	cfg.CacheTTL = 0
	cfg.ExternalAddress = "127.0.0.1:6443"
	id, err := authn.New(cfg, keys, w.reg)
	if err != nil {
		t.Fatal(err)
	}
	first, cancel := context.WithCancel(ctx)
	firstCode := make(chan int, 1)
	go func() {
		rec := httptest.NewRecorder()
		id.Paths[serviceaccount.JWKSPath].ServeHTTP(rec, httptest.NewRequest(http.MethodGet, serviceaccount.JWKSPath, nil).WithContext(first))
		firstCode <- rec.Code
	}()
	<-firstStarted
	if _, _, err := w.keys.Retire(ctx); err != nil {
		t.Fatal(err)
	}
	node := &world{t: t, log: w.log, reg: w.reg, keys: keys, id: id}
	if _, ok, err := node.authenticate(old); ok || errors.Is(err, authn.ErrNotFresh) || calls.Load() != 2 {
		t.Fatalf("a token of the key retired after a catch-up began: authenticated %v, %v, after %d catch-ups (want refused after a second one)", ok, err, calls.Load())
	}
	cancel()
	if code := <-firstCode; code != http.StatusServiceUnavailable {
		t.Fatalf("the cancelled first request: %d", code)
	}
}
