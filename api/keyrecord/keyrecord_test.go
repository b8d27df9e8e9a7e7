package keyrecord

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/internal/memlog"
)

func TestRecord(t *testing.T) {
	ctx := context.Background()
	l := memlog.New()
	r := Record{Backend: l, Key: fsm.Key{Space: fsm.SpaceInternal, Resource: "things", Name: "set"}, AtRest: storage.AtRest{}}
	var got map[string]string
	if kv, err := r.Read(&got); kv != nil || err != nil {
		t.Fatalf("an absent record: %v %v", kv, err)
	}
	if err := r.Write(ctx, nil, map[string]string{"a": "1"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Write(ctx, nil, map[string]string{"a": "2"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("a second create: %v, want ErrConflict", err)
	}
	kv, err := r.Read(&got)
	if err != nil || got["a"] != "1" {
		t.Fatalf("read %v %v", got, err)
	}
	if err := r.Write(ctx, kv, map[string]string{"a": "3"}); err != nil {
		t.Fatal(err)
	}
	if err := r.Write(ctx, kv, map[string]string{"a": "4"}); !errors.Is(err, ErrConflict) {
		t.Fatalf("a write from a stale read: %v, want ErrConflict", err)
	}
	// A value that is not the record's JSON: unreadable, never quoted.
	if res, err := l.Propose(ctx, &fsm.Command{Op: fsm.OpPut, Key: r.Key, Value: []byte("private key bytes")}); err != nil || res.Err != nil {
		t.Fatal(err, res.Err)
	}
	if _, err := r.Read(&got); !errors.Is(err, ErrUnreadable) || strings.Contains(err.Error(), "private") {
		t.Fatalf("an undecodable record: %v", err)
	}
}
