package cluster

import (
	"errors"
	"io"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// The follower's answers in TestStoppingPipeline.
const (
	accepted = "accepted"
	refused  = "refused"
	// failed: an RPC error instead of an answer (the transport keeps the
	// connection); raft's decoder sees Success false and stops as for a
	// refusal.
	failed = "failed"
)

// TestStoppingPipeline drives the wrapper over raft's real network
// transport on loopback, with a follower that answers as the table says,
// and plays raft's decoder: it stops reading at the first unsuccessful
// answer. Every send after that must return at once with
// errPipelineRefused; over the bare transport the second one blocks for
// ever (hashicorp/raft#612).
func TestStoppingPipeline(t *testing.T) {
	for _, tc := range []struct {
		name    string
		answers []string // the follower's, in order
		// refusedAt is the answer after which sends are refused; -1 for
		// none.
		refusedAt int
	}{
		{"all accepted", []string{accepted, accepted, accepted, accepted}, -1},
		{"first refused", []string{refused}, 0},
		{"refused after two", []string{accepted, accepted, refused}, 2},
		{"an error after one", []string{accepted, failed}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leader, follower := tcpTransports(t)
			go func() {
				for i := 0; ; i++ {
					select {
					case rpc := <-follower.Consumer():
						// Past the table the follower accepts, so only the
						// table's answers can stop the pipeline.
						answer := accepted
						if i < len(tc.answers) {
							answer = tc.answers[i]
						}
						if answer == failed {
							rpc.Respond(&raft.AppendEntriesResponse{}, errors.New("the follower failed"))
						} else {
							rpc.Respond(&raft.AppendEntriesResponse{Term: 1, Success: answer == accepted}, nil)
						}
					case <-time.After(30 * time.Second):
						return
					}
				}
			}()
			inner, err := leader.AppendEntriesPipeline("follower", follower.LocalAddr())
			if err != nil {
				t.Fatal(err)
			}
			p := newStoppingPipeline(inner)
			defer p.Close()
			for i, want := range tc.answers {
				if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: 1}, new(raft.AppendEntriesResponse)); err != nil {
					t.Fatalf("send %d: %v", i, err)
				}
				select {
				case f := <-p.Consumer():
					if got := f.Response().Success; got != (want == accepted) || (f.Error() != nil) != (want == failed) {
						t.Fatalf("answer %d: Success %v, error %v, want %s", i, got, f.Error(), want)
					}
				case <-time.After(20 * time.Second):
					t.Fatalf("no answer %d", i)
				}
			}
			if tc.refusedAt < 0 {
				return
			}
			// The decoder is gone. A few sends may still go out while the
			// reader takes the refusal in; none may block, and they end
			// refused.
			done := make(chan error, 1)
			go func() {
				var err error
				for range 10 {
					if _, err = p.AppendEntries(&raft.AppendEntriesRequest{Term: 1}, new(raft.AppendEntriesResponse)); err != nil {
						break
					}
				}
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, errPipelineRefused) {
					t.Fatalf("send after a refusal: %v, want errPipelineRefused", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("a send after a refusal blocked")
			}
		})
	}
}

// tcpTransports are two raft network transports on loopback.
func tcpTransports(t *testing.T) (leader, follower *raft.NetworkTransport) {
	t.Helper()
	mk := func() *raft.NetworkTransport {
		tr, err := raft.NewTCPTransport("127.0.0.1:0", nil, 3, 10*time.Second, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tr.Close() })
		return tr
	}
	return mk(), mk()
}
