package registry

import (
	"context"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	api "k8s.io/kubernetes/pkg/apis/core"

	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/watchcache"
)

// eventEnv is a node serving both Event resources with ttl.
func eventEnv(t *testing.T, ttl time.Duration) *env {
	t.Helper()
	return newEnvWith(t, append(CoreResources(), EventResources(ttl)...), func(cfg *storage.Config, f *fsm.FSM) { cfg.Feed = f })
}

// via is the context of a request to gvr in namespace ns: kube's event
// strategy validates by the request's group version.
func (e *env) via(gvr schema.GroupVersionResource, ns, verb string) context.Context {
	return genericapirequest.WithRequestInfo(e.in(ns), &genericapirequest.RequestInfo{
		IsResourceRequest: true, Verb: verb, APIGroup: gvr.Group, APIVersion: gvr.Version, Resource: gvr.Resource, Namespace: ns,
	})
}

// legacyEvent is what a core v1 recorder writes.
func legacyEvent(ns, name string) *api.Event {
	now := metav1.NewTime(time.Now())
	return &api.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: ns},
		InvolvedObject: api.ObjectReference{Kind: "ConfigMap", Namespace: ns, Name: "cm", UID: "uid-cm", APIVersion: "v1"},
		Reason:         "Tested", Message: "a legacy event", Type: api.EventTypeNormal,
		Source: api.EventSource{Component: "test"}, FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
}

// newEvent is what an events.k8s.io/v1 recorder writes.
func newEvent(ns, name string) *api.Event {
	return &api.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name, Namespace: ns},
		InvolvedObject: api.ObjectReference{Kind: "ConfigMap", Namespace: ns, Name: "cm", UID: "uid-cm", APIVersion: "v1"},
		EventTime:      metav1.NewMicroTime(time.Now()),
		Reason:         "Tested", Action: "Testing", Message: "a new event", Type: api.EventTypeNormal,
		ReportingController: "example.com/test", ReportingInstance: "test-1",
	}
}

// invalidFields are the fields of a 422's causes, sorted, each once (kube
// may name a field twice); nil for no error.
func invalidFields(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	if !apierrors.IsInvalid(err) {
		t.Fatalf("error %v (code %d), want 422 Invalid", err, statusCode(err))
	}
	var out []string
	for _, c := range err.(apierrors.APIStatus).Status().Details.Causes {
		if !slices.Contains(out, c.Field) {
			out = append(out, c.Field)
		}
	}
	sort.Strings(out)
	return out
}

func TestEventValidationDependsOnTheRequestGroupVersion(t *testing.T) {
	e := eventEnv(t, 0)
	e.namespace(t, "ns")
	core, events := CoreEventsGVR, EventsEventsGVR
	cases := []struct {
		name  string
		gvr   schema.GroupVersionResource
		event func() *api.Event
		want  []string // fields of the 422, nil: created
	}{
		{"core v1 takes a legacy event", core, func() *api.Event { return legacyEvent("ns", "a") }, nil},
		{"events.k8s.io/v1 requires eventTime and refuses the deprecated fields", events,
			func() *api.Event { return legacyEvent("ns", "b") },
			[]string{"count", "eventTime", "firstTimestamp", "lastTimestamp", "source"}},
		{"events.k8s.io/v1 requires the reporting fields, action and reason of an event with eventTime", events,
			func() *api.Event {
				ev := newEvent("ns", "c")
				ev.ReportingController, ev.ReportingInstance, ev.Action, ev.Reason = "", "", "", ""
				return ev
			},
			[]string{"action", "reason", "reportingController", "reportingInstance"}},
		{"core v1 requires them too once eventTime is set, naming reportingComponent", core,
			func() *api.Event {
				ev := newEvent("ns", "d")
				ev.ReportingController, ev.ReportingInstance, ev.Action, ev.Reason = "", "", "", ""
				return ev
			},
			[]string{"action", "reason", "reportingComponent", "reportingInstance"}},
		{"events.k8s.io/v1 refuses a type other than Normal or Warning", events,
			func() *api.Event { ev := newEvent("ns", "e"); ev.Type = "Odd"; return ev }, []string{"type"}},
		{"core v1 takes any type", core,
			func() *api.Event { ev := legacyEvent("ns", "f"); ev.Type = "Odd"; return ev }, nil},
		{"a legacy event refuses an involved object of another namespace", core,
			func() *api.Event { ev := legacyEvent("ns", "g"); ev.InvolvedObject.Namespace = "other"; return ev },
			[]string{"involvedObject.namespace"}},
		{"a new event about a cluster-scoped object belongs in default or kube-system", events,
			func() *api.Event { ev := newEvent("ns", "h"); ev.InvolvedObject.Namespace = ""; return ev },
			[]string{"involvedObject.namespace"}},
		{"a new event about a cluster-scoped object may be in default", events,
			func() *api.Event { ev := newEvent("default", "h2"); ev.InvolvedObject.Namespace = ""; return ev }, nil},
		{"events.k8s.io/v1 takes a complete event", events, func() *api.Event { return newEvent("ns", "i") }, nil},
		{"core v1 takes a complete new event", core, func() *api.Event { return newEvent("ns", "j") }, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ev := tc.event()
			_, err := e.reg.Store(tc.gvr).Create(e.via(tc.gvr, ev.Namespace, "create"), ev, false)
			got := invalidFields(t, err)
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("invalid fields %v, want %v (error: %v)", got, tc.want, err)
			}
		})
	}
}

func TestEventUpdateIsStricterThroughEventsV1(t *testing.T) {
	e := eventEnv(t, 0)
	e.namespace(t, "ns")
	for _, gvr := range []schema.GroupVersionResource{CoreEventsGVR, EventsEventsGVR} {
		st := e.reg.Store(gvr)
		name := "upd-" + strings.ReplaceAll(gvr.Group, ".", "-")
		created, err := st.Create(e.via(gvr, "ns", "create"), newEvent("ns", name), false)
		if err != nil {
			t.Fatal(err)
		}
		changed := created.(*api.Event).DeepCopy()
		changed.Reason = "Changed"
		_, err = st.Update(e.via(gvr, "ns", "update"), name, rest.DefaultUpdatedObjectInfo(changed), false)
		got := invalidFields(t, err)
		want := ""
		if gvr == EventsEventsGVR {
			want = "reason"
		}
		if strings.Join(got, ",") != want {
			t.Fatalf("%s: invalid fields of a changed reason %v, want %q", gvr, got, want)
		}
	}
}

func TestEventIsOneObjectUnderBothGroupVersions(t *testing.T) {
	e := eventEnv(t, 0)
	e.namespace(t, "ns")
	core, events := e.reg.Store(CoreEventsGVR), e.reg.Store(EventsEventsGVR)

	t.Run("created through core v1, read through events.k8s.io/v1", func(t *testing.T) {
		out, err := core.Create(e.via(CoreEventsGVR, "ns", "create"), legacyEvent("ns", "from-core"), false)
		if err != nil {
			t.Fatal(err)
		}
		got, err := events.Get(e.via(EventsEventsGVR, "ns", "get"), "from-core", &metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sameObject(t, out.(*api.Event), got.(*api.Event))
		var v1 eventsv1.Event
		if err := Scheme.Convert(got, &v1, nil); err != nil {
			t.Fatal(err)
		}
		if v1.Note != "a legacy event" || v1.Regarding.Name != "cm" || v1.DeprecatedCount != 1 || v1.DeprecatedSource.Component != "test" {
			t.Fatalf("events.k8s.io/v1 view: note %q regarding %q count %d source %q", v1.Note, v1.Regarding.Name, v1.DeprecatedCount, v1.DeprecatedSource.Component)
		}
	})
	t.Run("created through events.k8s.io/v1, read and selected through core v1", func(t *testing.T) {
		out, err := events.Create(e.via(EventsEventsGVR, "ns", "create"), newEvent("ns", "from-events"), false)
		if err != nil {
			t.Fatal(err)
		}
		got, err := core.Get(e.via(CoreEventsGVR, "ns", "get"), "from-events", &metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sameObject(t, out.(*api.Event), got.(*api.Event))
		// kubectl describe's selector.
		sel := fields.SelectorFromSet(fields.Set{"involvedObject.name": "cm", "involvedObject.namespace": "ns",
			"involvedObject.kind": "ConfigMap", "involvedObject.uid": "uid-cm", "reportingComponent": "example.com/test"})
		list, err := core.List(e.via(CoreEventsGVR, "", "list"), &metainternalversion.ListOptions{FieldSelector: sel})
		if err != nil {
			t.Fatal(err)
		}
		if items := list.(*api.EventList).Items; len(items) != 1 || items[0].Name != "from-events" {
			t.Fatalf("core v1 list by involvedObject: %d items", len(items))
		}
	})
	t.Run("events.k8s.io/v1 field labels map to core's", func(t *testing.T) {
		for label, want := range map[string]string{"regarding.name": "involvedObject.name", "reportingController": "reportingComponent"} {
			got, _, err := Scheme.ConvertFieldLabel(EventsEventsGVR.GroupVersion().WithKind("Event"), label, "x")
			if err != nil || got != want {
				t.Fatalf("%s converts to %q (%v), want %q", label, got, err, want)
			}
		}
		if _, _, err := Scheme.ConvertFieldLabel(EventsEventsGVR.GroupVersion().WithKind("Event"), "involvedObject.name", "x"); err == nil {
			t.Fatal("events.k8s.io/v1 took core's field label involvedObject.name, kube refuses it")
		}
	})
	t.Run("one key, one count", func(t *testing.T) {
		n := e.reg.storage.ObjectCounts()[schema.GroupResource{Resource: "events"}]
		if n != 2 {
			t.Fatalf("apiserver_storage_objects counts %d events, want 2", n)
		}
		if _, ok := e.reg.storage.ObjectCounts()[schema.GroupResource{Group: EventsGroup, Resource: "events"}]; ok {
			t.Fatal("events.k8s.io events are counted as a resource of their own")
		}
	})
	t.Run("a 404 names the resource requested", func(t *testing.T) {
		_, err := events.Get(e.via(EventsEventsGVR, "ns", "get"), "none", &metav1.GetOptions{})
		wantStatus(t, err, apierrors.IsNotFound, "404", `events.events.k8s.io "none" not found`)
	})
}

func sameObject(t *testing.T, a, b *api.Event) {
	t.Helper()
	if a.UID == "" || a.UID != b.UID || a.ResourceVersion != b.ResourceVersion {
		t.Fatalf("uid %q rv %q vs uid %q rv %q: not one object", a.UID, a.ResourceVersion, b.UID, b.ResourceVersion)
	}
}

// TestEventsExpireThroughTheLog runs the node's Expiry with a short TTL
// while the node leads: an event disappears by a delete applied from the
// log, which a watcher of the stream sees as any other delete.
func TestEventsExpireThroughTheLog(t *testing.T) {
	e := eventEnv(t, 2*time.Second)
	e.namespace(t, "ns")
	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan error, 1)
	go func() { done <- e.reg.storage.Expiry(nil).Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("expiry term: %v", err)
		}
	})

	out, err := e.reg.Store(EventsEventsGVR).Create(e.via(EventsEventsGVR, "ns", "create"), newEvent("ns", "short"), false)
	if err != nil {
		t.Fatal(err)
	}
	created := rvOf(t, out.(*api.Event).ResourceVersion)
	w, err := e.reg.Store(CoreEventsGVR).Watch(e.via(CoreEventsGVR, "ns", "watch"),
		&metainternalversion.ListOptions{ResourceVersion: out.(*api.Event).ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case ev, ok := <-w.Events():
		if !ok {
			t.Fatal("the watch ended")
		}
		if ev.Type != watchcache.Deleted || ev.Revision <= created {
			t.Fatalf("watch event %s at %d, want the expiry's DELETED after %d", ev.Type, ev.Revision, created)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the event did not expire within 30s of a 2s TTL")
	}
	_, err = e.reg.Store(CoreEventsGVR).Get(e.via(CoreEventsGVR, "ns", "get"), "short", &metav1.GetOptions{})
	wantStatus(t, err, apierrors.IsNotFound, "404", "")
}
