package main

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/fsm"
)

// builtinKeys is the binary's list of built-in resources by the group and
// resource of their keys, for the fsm (fsm.Config.Builtin: an untagged key
// outside it is a custom object an earlier build wrote) and for the
// storage layer, which refuses a built-in store it does not hold
// (storage.Config.Builtin), so the two can never disagree. It holds every
// resource the binary has a store for, whatever --runtime-config serves,
// so that every node of a cluster classifies the log alike.
func builtinKeys(resources []*registry.Resource) fsm.Builtin {
	set := make(map[schema.GroupResource]bool, len(resources))
	for _, r := range resources {
		if r.Custom == nil {
			set[r.Stored().GroupResource()] = true
		}
	}
	return func(group, resource string) bool { return set[schema.GroupResource{Group: group, Resource: resource}] }
}
