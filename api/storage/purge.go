package storage

import (
	"context"
	"errors"
	"fmt"

	"github.com/trustplane/trustplane/fsm"
)

// CustomKeys is what a custom resource definition's cleanup needs of the
// storage layer when the node serves none of the definition's versions (a
// definition refused, or whose names are not accepted): the keys of its
// objects and their deletion, without decoding them. The keys are the
// definition's own (the custom key space, its group and spec plural,
// which its name fixes and no other definition shares), so deleting them
// can never reach another definition's objects, a built-in object or an
// internal record.
type CustomKeys struct {
	s      *Storage
	prefix fsm.Prefix
}

// ErrNotCustom: CustomKeys was asked for keys outside the custom space.
var ErrNotCustom = errors.New("storage: only custom resources' keys may be purged")

// CustomKeys returns the keys of the custom resource group/plural.
func (s *Storage) CustomKeys(group, plural string) (*CustomKeys, error) {
	p := fsm.Prefix{Space: fsm.SpaceCustom, Group: group, Resource: plural}
	if err := p.Valid(); err != nil || plural == "" {
		return nil, fmt.Errorf("%w: %s/%s: %v", ErrNotCustom, group, plural, err)
	}
	return &CustomKeys{s: s, prefix: p}, nil
}

// Live lists the live objects' keys in namespace ("" for all), at this
// node's applied state.
func (c *CustomKeys) Live(namespace string) ([]*fsm.KV, error) {
	p := c.prefix
	p.Namespace = namespace
	var out []*fsm.KV
	after := ""
	for {
		res, err := c.s.backend.List(p, fsm.ListOptions{StartAfter: after, Limit: 1024})
		if err != nil {
			return nil, err
		}
		out = append(out, res.KVs...)
		if !res.More || len(res.KVs) == 0 {
			return out, nil
		}
		after = res.KVs[len(res.KVs)-1].Key.String()
	}
}

// Purge deletes the live objects in namespace ("" for all) through the
// log, each guarded by the version it listed, and ignores finalizers: no
// store serves them, so nothing could ever remove one. It returns how
// many it deleted.
func (c *CustomKeys) Purge(ctx context.Context, namespace string) (int, error) {
	kvs, err := c.Live(namespace)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, kv := range kvs {
		res, err := c.s.backend.Propose(ctx, &fsm.Command{Op: fsm.OpDelete, Key: kv.Key, ModRevision: kv.ModRevision})
		if err != nil {
			return n, ProposeErr(err)
		}
		if res.Err == nil {
			n++
		}
	}
	return n, nil
}
