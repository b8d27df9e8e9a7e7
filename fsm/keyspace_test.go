package fsm

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/hashicorp/raft"
)

// The attacks of issue 28 at the fsm level: a custom key naming a built-in
// resource, or the internal group, is another key, in another space.
func TestKeySpacesAreDisjoint(t *testing.T) {
	builtin := Key{Group: "rbac.authorization.k8s.io", Resource: "clusterroles", Name: "admin"}
	custom := Key{Space: SpaceCustom, Group: "rbac.authorization.k8s.io", Resource: "clusterroles", Name: "admin"}
	internal := Key{Space: SpaceInternal, Resource: "signingkeys", Name: "00000000000000000001"}
	customInternal := Key{Space: SpaceCustom, Group: InternalGroup, Resource: "signingkeys", Name: "00000000000000000001"}

	h := newHarness(t)
	h.mustPut(builtin, "role")
	h.mustPut(internal, "key")
	for _, k := range []Key{custom, customInternal} {
		// MustNotExist: the custom key is free even though its group,
		// resource and name equal those of an existing key.
		if r := h.apply(&Command{Op: OpPut, Key: k, Value: []byte("evil"), MustNotExist: true}); r.Err != nil {
			t.Fatalf("put %v: %v", k, r.Err)
		}
	}
	for k, want := range map[Key]string{builtin: "role", internal: "key", custom: "evil", customInternal: "evil"} {
		kv, _, err := h.f.Get(k, 0)
		if err != nil || kv == nil || string(kv.Value) != want || kv.Key != k {
			t.Errorf("Get(%v) = %v, %v; want %q under the same key", k, kv, err, want)
		}
	}
	// A list of one space never sees another's keys.
	for p, want := range map[Prefix]int{
		{Group: builtin.Group, Resource: builtin.Resource}:                     1,
		{Space: SpaceCustom, Group: builtin.Group, Resource: builtin.Resource}: 1,
		{Space: SpaceInternal, Resource: "signingkeys"}:                        1,
		{Space: SpaceCustom, Group: InternalGroup, Resource: "signingkeys"}:    1,
	} {
		res, err := h.f.List(p, ListOptions{})
		if err != nil || len(res.KVs) != want || res.KVs[0].Key.Space != p.Space {
			t.Errorf("List(%v) = %v, %v; want %d key in space %v", p, res.KVs, err, want, p.Space)
		}
	}
	// Deleting the custom key leaves the built-in one.
	h.mustDelete(custom)
	if kv, _, _ := h.f.Get(builtin, 0); kv == nil {
		t.Fatal("deleting the custom key deleted the built-in one")
	}
	// Snapshots keep the spaces.
	restored := New()
	var sink memSink
	snap, _ := h.f.Snapshot()
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	if err := restored.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
		t.Fatal(err)
	}
	for _, k := range []Key{builtin, internal, customInternal} {
		if kv, _, _ := restored.Get(k, 0); kv == nil || kv.Key != k {
			t.Errorf("after restore, Get(%v) = %v", k, kv)
		}
	}
	if kv, _, _ := restored.Get(custom, 0); kv != nil {
		t.Errorf("after restore, the deleted custom key is back: %v", kv)
	}
}

func TestKeyValid(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  Key
		ok   bool
	}{
		{"core group", Key{Resource: "configmaps"}, true},
		{"built-in group", Key{Group: "rbac.authorization.k8s.io", Resource: "roles"}, true},
		{"built-in key in the internal group", Key{Group: InternalGroup, Resource: "signingkeys"}, false},
		{"built-in key under the internal group", Key{Group: "x." + InternalGroup, Resource: "y"}, false},
		{"built-in key that reads as custom", Key{Group: "custom/example.com", Resource: "gizmos"}, false},
		{"custom key", Key{Space: SpaceCustom, Group: "example.com", Resource: "gizmos"}, true},
		{"custom key in the internal group", Key{Space: SpaceCustom, Group: InternalGroup, Resource: "signingkeys"}, true},
		{"custom key without a group", Key{Space: SpaceCustom, Resource: "gizmos"}, false},
		{"custom key with a slash", Key{Space: SpaceCustom, Group: "a/b", Resource: "gizmos"}, false},
		{"internal key", Key{Space: SpaceInternal, Resource: "signingkeys"}, true},
		{"internal key with a group", Key{Space: SpaceInternal, Group: "example.com", Resource: "signingkeys"}, false},
		{"unknown space", Key{Space: 9, Resource: "x"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.key.Valid()
			if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInvalidKey)) {
				t.Fatalf("Valid() = %v, want ok=%v", err, tc.ok)
			}
			if err := (Prefix{Space: tc.key.Space, Group: tc.key.Group, Resource: tc.key.Resource}).Valid(); (err == nil) != tc.ok {
				t.Fatalf("Prefix.Valid() = %v, want ok=%v", err, tc.ok)
			}
			if !tc.ok {
				return
			}
			// A valid key survives the log and Key.String unchanged.
			k := tc.key
			k.Name = "n"
			c, err := DecodeCommand((&Command{Op: OpPut, Key: k}).Encode())
			if err != nil || c.Key != k {
				t.Fatalf("round trip = %v, %v; want %v", c, err, k)
			}
			if p, ok := ParseKey(k.String()); !ok || p != k {
				t.Fatalf("ParseKey(String()) = %v, want %v", p, k)
			}
		})
	}
}

// legacyBuiltin is a build's list of built-in resources, as cmd/trustplane
// hands it to the FSM.
func legacyBuiltin(group, resource string) bool {
	return group == "" && resource == "configmaps" ||
		group == "rbac.authorization.k8s.io" && resource == "clusterroles"
}

// legacyEntries are log entries as builds before key spaces wrote them:
// every group untagged, internal records under InternalGroup.
var legacyEntries = []*Command{
	{Op: OpPut, Key: Key{Resource: "configmaps", Namespace: "ns", Name: "cm"}, Value: []byte("cm"), UID: "u1"},
	{Op: OpPut, Key: Key{Group: "example.com", Resource: "gizmos", Namespace: "ns", Name: "g"}, Value: []byte("g"), UID: "u2"},
	{Op: OpPut, Key: Key{Space: SpaceInternal, Resource: "signingkeys", Name: "k"}, Value: []byte("k"), UID: "u3"},
	{Op: OpPut, Key: Key{Group: "rbac.authorization.k8s.io", Resource: "clusterroles", Name: "admin"}, Value: []byte("r"), UID: "u4"},
}

// Existing data directories migrate with nothing lost: a log or snapshot
// written before key spaces puts each key in its space on every node.
func TestLegacyKeysAreClassified(t *testing.T) {
	want := map[Key]string{
		{Resource: "configmaps", Namespace: "ns", Name: "cm"}:                                      "cm",
		{Space: SpaceCustom, Group: "example.com", Resource: "gizmos", Namespace: "ns", Name: "g"}: "g",
		{Space: SpaceInternal, Resource: "signingkeys", Name: "k"}:                                 "k",
		{Group: "rbac.authorization.k8s.io", Resource: "clusterroles", Name: "admin"}:              "r",
	}
	check := func(t *testing.T, f *FSM) {
		t.Helper()
		for k, v := range want {
			kv, _, _ := f.Get(k, 0)
			if kv == nil || string(kv.Value) != v || kv.Key != k {
				t.Errorf("Get(%v) = %v, want %q", k, kv, v)
			}
		}
		// The untagged spelling of the custom object is gone.
		if kv, _, _ := f.Get(Key{Group: "example.com", Resource: "gizmos", Namespace: "ns", Name: "g"}, 0); kv != nil {
			t.Errorf("the custom object is also a built-in key: %v", kv)
		}
	}

	// An old build's FSM (no classification) writes the legacy log and a
	// legacy snapshot.
	old := New()
	for i, c := range legacyEntries {
		old.Apply(cmdLog(uint64(i+1), c))
	}
	var legacySnap memSink
	snap, _ := old.Snapshot()
	if err := snap.Persist(&legacySnap); err != nil {
		t.Fatal(err)
	}

	t.Run("log replay", func(t *testing.T) {
		f := NewWithConfig(Config{Builtin: legacyBuiltin})
		for i, c := range legacyEntries {
			f.Apply(cmdLog(uint64(i+1), c))
		}
		check(t, f)
		// A later delete of the untagged spelling (an old leader, during a
		// rolling upgrade) deletes the custom object.
		r := f.Apply(cmdLog(uint64(len(legacyEntries)+1), &Command{Op: OpDelete, Key: Key{Group: "example.com", Resource: "gizmos", Namespace: "ns", Name: "g"}})).(*Result)
		if r.Err != nil {
			t.Fatalf("legacy delete: %v", r.Err)
		}
	})
	t.Run("snapshot restore", func(t *testing.T) {
		f := NewWithConfig(Config{Builtin: legacyBuiltin})
		if err := f.Restore(io.NopCloser(bytes.NewReader(legacySnap.Bytes()))); err != nil {
			t.Fatal(err)
		}
		check(t, f)
		// Its next snapshot writes the custom object tagged, and a node
		// restoring it classifies nothing.
		var sink memSink
		snap, _ := f.Snapshot()
		if err := snap.Persist(&sink); err != nil {
			t.Fatal(err)
		}
		g := New()
		if err := g.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
			t.Fatal(err)
		}
		check(t, g)
	})
	t.Run("two spellings of one object keep the newer", func(t *testing.T) {
		// An old follower during a rolling upgrade: an old leader wrote the
		// object untagged, a new leader then rewrote it tagged.
		old := New()
		untagged := Key{Group: "example.com", Resource: "gizmos", Name: "g"}
		tagged := Key{Space: SpaceCustom, Group: "example.com", Resource: "gizmos", Name: "g"}
		old.Apply(cmdLog(1, &Command{Op: OpPut, Key: untagged, Value: []byte("v1"), UID: "u"}))
		old.Apply(cmdLog(2, &Command{Op: OpPut, Key: untagged, Value: []byte("v2"), UID: "u"}))
		old.Apply(cmdLog(3, &Command{Op: OpPut, Key: tagged, Value: []byte("v3"), UID: "u"}))
		var sink memSink
		snap, _ := old.Snapshot()
		if err := snap.Persist(&sink); err != nil {
			t.Fatal(err)
		}
		f := NewWithConfig(Config{Builtin: legacyBuiltin})
		if err := f.Restore(io.NopCloser(bytes.NewReader(sink.Bytes()))); err != nil {
			t.Fatal(err)
		}
		kv, _, _ := f.Get(tagged, 0)
		if kv == nil || string(kv.Value) != "v3" {
			t.Fatalf("Get = %v, want v3", kv)
		}
		if got := f.HistoryBytes(); got != 0 {
			t.Fatalf("HistoryBytes = %d, want 0 (the older spelling is dropped whole)", got)
		}
	})
}

// Compactions and no-ops carry an empty key; classification must not
// touch them (an empty group and resource is no built-in resource).
func TestClassificationSkipsKeylessCommands(t *testing.T) {
	f := NewWithConfig(Config{Builtin: legacyBuiltin})
	f.Apply(cmdLog(1, &Command{Op: OpPut, Key: Key{Resource: "configmaps", Name: "a"}, Value: []byte("a")}))
	f.Apply(cmdLog(2, &Command{Op: OpNoop}))
	f.Apply(&raft.Log{Index: 3, Type: raft.LogCommand, Data: (&Command{Op: OpCompact, CompactRevision: 2}).Encode()})
	if kv, _, _ := f.Get(Key{Resource: "configmaps", Name: "a"}, 0); kv == nil {
		t.Fatal("lost the configmap")
	}
}
