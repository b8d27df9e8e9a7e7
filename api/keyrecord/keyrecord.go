// Package keyrecord is the stored form a rotation root keeps its keys in
// (api/gossipkeys, api/nodecas): one JSON record at an internal key,
// sealed at rest, read from the node's applied state and written with one
// compare-and-swap, so a step changes the whole set at once or not at all.
// Its errors never quote the stored bytes: the record holds private keys.
package keyrecord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
)

var (
	// ErrUnreadable: the stored record cannot be opened or decoded.
	ErrUnreadable = errors.New("keyrecord: the stored record is unreadable")
	// ErrConflict: the record changed between a step's read and write.
	ErrConflict = errors.New("keyrecord: the record changed meanwhile")
)

// Backend is what a record needs of the replicated state machine.
type Backend interface {
	Propose(ctx context.Context, cmd *fsm.Command) (*fsm.Result, error)
	List(p fsm.Prefix, opts fsm.ListOptions) (fsm.ListResult, error)
}

// Record is one record at Key, sealed by AtRest.
type Record struct {
	Backend Backend
	Key     fsm.Key
	AtRest  storage.AtRest
}

// Read decodes the record into v and returns its stored version; nil when
// there is none (v untouched).
func (r Record) Read(v any) (*fsm.KV, error) {
	res, err := r.Backend.List(fsm.Prefix{Space: r.Key.Space, Group: r.Key.Group, Resource: r.Key.Resource, Namespace: r.Key.Namespace}, fsm.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("keyrecord: reading %s: %w", r.Key.Resource, err)
	}
	for _, kv := range res.KVs {
		if kv.Key != r.Key {
			continue
		}
		plain, _, err := r.AtRest.Open(kv)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnreadable, err)
		}
		if json.Unmarshal(plain, v) != nil {
			return nil, ErrUnreadable
		}
		return kv, nil
	}
	return nil, nil
}

// Write seals v and stores it with a compare-and-swap on prev (nil: the
// record must not exist); a failed precondition is ErrConflict.
func (r Record) Write(ctx context.Context, prev *fsm.KV, v any) error {
	plain, err := json.Marshal(v)
	if err != nil {
		return err
	}
	val, err := r.AtRest.Seal(r.Key, plain)
	if err != nil {
		return fmt.Errorf("keyrecord: sealing %s: %w", r.Key.Resource, err)
	}
	cmd := &fsm.Command{Op: fsm.OpPut, Key: r.Key, Value: val}
	if prev == nil {
		cmd.MustNotExist = true
	} else {
		cmd.ModRevision = prev.ModRevision
	}
	res, err := r.Backend.Propose(ctx, cmd)
	if err != nil {
		return fmt.Errorf("keyrecord: writing %s: %w", r.Key.Resource, err)
	}
	if res.Err != nil {
		return fmt.Errorf("%w (%v)", ErrConflict, res.Err)
	}
	return nil
}
