package fsm

import (
	"errors"
	"fmt"
	"strings"
)

// Space is a key space of the store. Built-in objects, custom resources and
// trustplane's internal records live in disjoint spaces, so that no custom
// resource definition, whatever group and plural it names, can reach a
// built-in object or an internal record (a signing key, a removal marker),
// and no built-in store can read a custom object's bytes. The storage layer
// chooses a key's space from the store it builds the key for; nothing a
// request carries (a group, a plural, a name) can choose it.
//
// kube-apiserver gets the same separation from its etcd paths: custom
// resources under /registry/<group>/<plural>, built-ins under
// /registry/<resource>, and no signing key in etcd at all.
type Space uint8

const (
	// SpaceBuiltin holds the objects of the resources compiled into the
	// binary. It is the zero value, so a Key written without a space is a
	// built-in one: the registry's built-in stores.
	SpaceBuiltin Space = iota
	// SpaceCustom holds the objects of custom resources, under their
	// definition's group and plural.
	SpaceCustom
	// SpaceInternal holds trustplane's own records (token signing keys,
	// removal markers, data-directory identities). No served resource
	// reads or writes it.
	SpaceInternal
)

func (s Space) String() string {
	switch s {
	case SpaceBuiltin:
		return "builtin"
	case SpaceCustom:
		return "custom"
	case SpaceInternal:
		return "internal"
	}
	return fmt.Sprintf("space(%d)", uint8(s))
}

// The space of a key travels in its group field, in the log and in
// snapshots, so that the command and snapshot formats (version 1) stay
// what every earlier build reads and writes (docs/OPERATIONS.md: nodes of
// two builds may mix during a rolling upgrade):
//
//   - a built-in key's group is written as it is: "" or a DNS subdomain;
//   - an internal key's group is written as InternalGroup, where earlier
//     builds kept the internal records already;
//   - a custom key's group is written as customGroupPrefix + group. The
//     prefix holds a '/', which no API group may contain, so no built-in
//     group and no definition's group can be mistaken for it.
//
// A group field without the prefix that is not InternalGroup is a built-in
// key, unless the FSM's Config.Builtin says its group and resource are not
// a built-in resource: then it is a custom object written before key spaces
// existed (see Config.Builtin).
const (
	// InternalGroup is the group internal keys are written under. No
	// definition may use it or any group under it (api/registry refuses
	// them), and no built-in resource does.
	InternalGroup     = "trustplane.internal"
	customGroupPrefix = "custom/"
)

// ErrInvalidKey: a key's group cannot be written in its space (a built-in
// group that looks like another space's, a group in the internal space).
var ErrInvalidKey = errors.New("fsm: invalid key")

// Valid reports whether k can be written in its space and read back as
// the same key. The storage layer checks it once per store, when it
// builds one, so that a key it makes can never land in another space.
func (k Key) Valid() error { return validGroup(k.Space, k.Group) }

// Valid is Key.Valid for every key under p.
func (p Prefix) Valid() error { return validGroup(p.Space, p.Group) }

func validGroup(s Space, group string) error {
	switch s {
	case SpaceBuiltin:
		if group == InternalGroup || strings.HasSuffix(group, "."+InternalGroup) || strings.Contains(group, "/") {
			return fmt.Errorf("%w: built-in group %q is reserved", ErrInvalidKey, group)
		}
	case SpaceCustom:
		if group == "" || strings.Contains(group, "/") {
			return fmt.Errorf("%w: custom group %q", ErrInvalidKey, group)
		}
	case SpaceInternal:
		if group != "" {
			return fmt.Errorf("%w: internal keys have no group (got %q)", ErrInvalidKey, group)
		}
	default:
		return fmt.Errorf("%w: unknown space %d", ErrInvalidKey, uint8(s))
	}
	return nil
}

// WireGroup is the group field p's keys are written with in the log and
// snapshots (for display: backup summaries).
func (p Prefix) WireGroup() string { return wireGroup(p.Space, p.Group) }

// wireGroup is the group field k's space and group are written as.
func wireGroup(s Space, group string) string {
	switch s {
	case SpaceCustom:
		return customGroupPrefix + group
	case SpaceInternal:
		return InternalGroup
	}
	return group
}

// splitWireGroup reverses wireGroup. An untagged group comes back as
// SpaceBuiltin; the FSM's classify may move it to SpaceCustom.
func splitWireGroup(w string) (Space, string) {
	switch {
	case strings.HasPrefix(w, customGroupPrefix):
		return SpaceCustom, w[len(customGroupPrefix):]
	case w == InternalGroup:
		return SpaceInternal, ""
	}
	return SpaceBuiltin, w
}

// Builtin reports whether a group and resource are a built-in resource's
// keys; see Config.Builtin.
type Builtin func(group, resource string) bool

// classify settles the space of a key read from the log or a snapshot:
// an untagged key whose group and resource are not a built-in resource's
// is a custom object written before key spaces existed.
func (b Builtin) classify(k *Key) {
	if b != nil && k.Space == SpaceBuiltin && !b(k.Group, k.Resource) {
		k.Space = SpaceCustom
	}
}
