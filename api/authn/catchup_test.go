package authn_test

import (
	"context"
	"sync/atomic"
	"testing"

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
