package fsm

import (
	"errors"
	"testing"
)

// TestResultAt: the result of each recent command is what its apply
// returned, failed preconditions included; indexes without a command, and
// those pushed out of the ring, have none.
func TestResultAt(t *testing.T) {
	h := newHarness(t)
	k := Key{Resource: "pods", Namespace: "a", Name: "p"}
	created := h.put(k, "1")
	h.config()
	exists := h.apply(&Command{Op: OpPut, Key: k, Value: []byte("2"), MustNotExist: true})
	if got := h.f.ResultAt(created.Revision); got != created {
		t.Fatalf("ResultAt(%d) = %+v, want the create's result", created.Revision, got)
	}
	if got := h.f.ResultAt(exists.Revision); got != exists || !errors.Is(got.Err, ErrExists) {
		t.Fatalf("ResultAt(%d) = %+v, want the failed precondition", exists.Revision, got)
	}
	if got := h.f.ResultAt(created.Revision + 1); got != nil {
		t.Fatalf("ResultAt of a configuration entry = %+v, want nil", got)
	}
	if got := h.f.ResultAt(h.next + 10); got != nil {
		t.Fatalf("ResultAt of a future index = %+v, want nil", got)
	}
	for range resultsKept {
		h.put(k, "again")
	}
	if got := h.f.ResultAt(created.Revision); got != nil {
		t.Fatalf("ResultAt of an index %d results ago = %+v, want nil", resultsKept, got)
	}
}
