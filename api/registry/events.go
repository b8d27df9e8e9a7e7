package registry

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/apis/events"
	"k8s.io/kubernetes/pkg/registry/core/event"
)

// EventsGroup is the group of the newer Event API.
const EventsGroup = events.GroupName

// Events' served resources.
var (
	CoreEventsGVR   = schema.GroupVersionResource{Version: "v1", Resource: "events"}
	EventsEventsGVR = schema.GroupVersionResource{Group: EventsGroup, Version: "v1", Resource: "events"}
)

// DefaultEventTTL is kube-apiserver's --event-ttl.
const DefaultEventTTL = time.Hour

// EventResources returns Events as kube-apiserver serves them: core v1
// events and events.k8s.io/v1 events, two resources over one store. Both
// keep internal core Events under core v1's key prefix, encoded as core
// v1, so an event written through either is read through the other with
// the same uid and resourceVersion; kube's conversions map note to
// message, regarding to involvedObject and so on. The strategy is kube's:
// its validation depends on the group version of the request
// (events.k8s.io/v1 requires reportingController, reportingInstance,
// action, reason and eventTime). ttl deletes an event that long after its
// last write (--event-ttl).
func EventResources(ttl time.Duration) []*Resource {
	var out []*Resource
	for _, gvr := range []schema.GroupVersionResource{CoreEventsGVR, EventsEventsGVR} {
		out = append(out, &Resource{
			GVR: gvr, KindName: "Event", Singular: "event", ShortNames: []string{"ev"}, Namespaced: true,
			StoredAs:    CoreEventsGVR,
			TTL:         ttl,
			NewFunc:     func() runtime.Object { return &api.Event{} },
			NewListFunc: func() runtime.Object { return &api.EventList{} },
			// Create-on-update and unconditional updates are the
			// strategy's (kube's recorders create, then patch).
			CreateStrategy: event.Strategy, UpdateStrategy: event.Strategy, DeleteStrategy: event.Strategy,
			GetAttrs:       event.GetAttrs,
			TableConvertor: coreTable,
		})
	}
	return out
}
