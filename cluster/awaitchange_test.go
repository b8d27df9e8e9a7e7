package cluster

import (
	"context"
	"errors"
	"testing"
)

// pendingFuture is a raft future that answers only when told to, as raft
// leaves a configuration change it accepted unanswered when it stops.
type pendingFuture chan error

func (f pendingFuture) Error() error { return <-f }

// TestAwaitChangeEndsAtShutdown: a membership loop waiting on a
// configuration change raft never answers returns ErrShutdown once the
// node shuts down, so Shutdown's wait for the loops ends (a 3-node test
// hung for ten minutes in Shutdown on an AddVoter future).
func TestAwaitChangeEndsAtShutdown(t *testing.T) {
	errBoom := errors.New("boom")
	for _, tc := range []struct {
		name   string
		answer error // sent before the wait, unless shutdown
		stop   bool
		want   error
	}{
		{name: "answered", answer: nil, want: nil},
		{name: "answered with an error", answer: errBoom, want: errBoom},
		{name: "never answered, node shut down", stop: true, want: ErrShutdown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			n := &Node{ctx: ctx}
			f := make(pendingFuture, 1)
			if tc.stop {
				cancel()
			} else {
				f <- tc.answer
			}
			if err := n.awaitChange(f); !errors.Is(err, tc.want) && err != tc.want {
				t.Fatalf("awaitChange = %v, want %v", err, tc.want)
			}
		})
	}
}
