package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Events (issue 15 point 3): core v1 events and events.k8s.io/v1 events are
// one stored object each, written by kube's event recorders (the garbage
// collector's) and shown by kubectl describe; --event-ttl expires them
// through the log.

// newEventAbout is an events.k8s.io/v1 event about ref, as an
// events.k8s.io recorder writes it.
func newEventAbout(ns, name string, ref corev1.ObjectReference, reason, note string) *eventsv1.Event {
	return &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Regarding:  ref, EventTime: metav1.NewMicroTime(time.Now()),
		Reason: reason, Note: note, Action: "Checking", Type: corev1.EventTypeNormal,
		ReportingController: "example.com/e2e", ReportingInstance: "e2e-1",
	}
}

func TestE2EEvents(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	cs := n.clientset()

	t.Run("kubectl describe csr shows an event about the CSR", func(t *testing.T) {
		csr, err := cs.CertificatesV1().CertificateSigningRequests().Create(ctx, newCSR(t, "described", "example.com/e2e"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// kube 1.33's CSR approver, signers and cleaner record no events,
		// so a client writes one, through events.k8s.io/v1: an event about
		// a cluster-scoped object lives in default.
		ref := corev1.ObjectReference{Kind: "CertificateSigningRequest", APIVersion: "certificates.k8s.io/v1", Name: csr.Name, UID: csr.UID}
		created, err := cs.EventsV1().Events("default").Create(ctx, newEventAbout("default", "described.1", ref, "Reviewed", "looked at by the e2e test"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The same object through core v1: same uid and resourceVersion.
		core, err := cs.CoreV1().Events("default").Get(ctx, "described.1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if core.UID != created.UID || core.ResourceVersion != created.ResourceVersion || core.Message != created.Note || core.InvolvedObject.Name != csr.Name {
			t.Fatalf("core v1 view uid %s rv %s message %q involved %q; events.k8s.io/v1 uid %s rv %s",
				core.UID, core.ResourceVersion, core.Message, core.InvolvedObject.Name, created.UID, created.ResourceVersion)
		}
		out := n.mustKubectl("describe", "csr", csr.Name)
		if !strings.Contains(out, "Events:") || !strings.Contains(out, "Reviewed") || !strings.Contains(out, "looked at by the e2e test") {
			t.Fatalf("kubectl describe csr shows no event:\n%s", out)
		}
		// kubectl get events prints kube's columns.
		out = n.mustKubectl("get", "events", "-n", "default")
		if !strings.Contains(out, "LAST SEEN") || !strings.Contains(out, "certificatesigningrequest/"+csr.Name) {
			t.Fatalf("kubectl get events:\n%s", out)
		}
		out = n.mustKubectl("get", "events.v1.events.k8s.io", "-n", "default", "--field-selector", "regarding.name="+csr.Name, "-o", "name")
		if strings.TrimSpace(out) != "event.events.k8s.io/described.1" {
			t.Fatalf("kubectl get events.v1.events.k8s.io --field-selector regarding.name: %q", out)
		}
	})

	t.Run("the garbage collector's recorder writes its events as itself", func(t *testing.T) {
		for _, ns := range []string{"ev-owner", "ev-dependent"} {
			if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		owner, err := cs.CoreV1().ConfigMaps("ev-owner").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		anchor, err := cs.CoreV1().ConfigMaps("ev-dependent").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "anchor"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// An ownerReference across namespaces is invalid: the collector
		// reports it with a Warning event about the dependent, which its
		// valid owner (anchor) keeps from being collected.
		refs := append(ownedBy("ConfigMap", owner, false), ownedBy("ConfigMap", anchor, false)...)
		dep, err := cs.CoreV1().ConfigMaps("ev-dependent").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Name: "dependent", OwnerReferences: refs}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got corev1.Event
		waitFor(t, gcWait, "the garbage collector's OwnerRefInvalidNamespace event", func() bool {
			l, err := cs.CoreV1().Events("ev-dependent").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.uid=" + string(dep.UID)})
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range l.Items {
				if ev.Reason == "OwnerRefInvalidNamespace" {
					got = ev
					return true
				}
			}
			return false
		})
		if got.Type != corev1.EventTypeWarning || got.Source.Component != "garbage-collector-controller" {
			t.Fatalf("event type %q source %q", got.Type, got.Source.Component)
		}
		out := n.mustKubectl("describe", "configmap", "-n", "ev-dependent", "dependent")
		if !strings.Contains(out, "OwnerRefInvalidNamespace") {
			t.Fatalf("kubectl describe configmap shows no event:\n%s", out)
		}
	})

	t.Run("hostile input changes nothing", func(t *testing.T) {
		before, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := n.httpClient()
		url := n.url() + "/apis/events.k8s.io/v1/namespaces/default/events"
		post := func(body []byte) httpResult {
			return do(t, c, http.MethodPost, url, jsonHeader("application/json"), body)
		}

		missing, _ := json.Marshal(map[string]any{
			"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": map[string]any{"name": "bad"},
			"eventTime": "2026-01-01T00:00:00.000000Z", "type": "Normal",
			"regarding": map[string]any{"kind": "Namespace", "name": "default"},
		})
		st := wantStatus(t, post(missing), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, `Event "bad" is invalid: [reportingController: Required value*`)
		for _, f := range []string{"reportingController", "reportingInstance", "action", "reason"} {
			found := false
			for _, cause := range st.Details.Causes {
				found = found || cause.Field == f
			}
			if !found {
				t.Fatalf("no cause for %s: %+v", f, st.Details.Causes)
			}
		}

		long := newEventAbout("default", "long-note", corev1.ObjectReference{Kind: "Namespace", Name: "default"}, "Long", strings.Repeat("n", 1025))
		body, _ := json.Marshal(long)
		wantStatus(t, post(body), http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, "")

		huge := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: "huge", Namespace: "default"},
			InvolvedObject: corev1.ObjectReference{Kind: "Namespace", Name: "default"},
			Reason:         "Huge", Message: strings.Repeat("m", 2<<20),
		}
		body, _ = json.Marshal(huge)
		r := do(t, c, http.MethodPost, n.url()+"/api/v1/namespaces/default/events", jsonHeader("application/json"), body)
		if r.code != http.StatusRequestEntityTooLarge {
			t.Fatalf("a 2 MiB event: %d, want 413: %.300s", r.code, r.body)
		}
		failureStatus(t, r)

		r = post([]byte(`{"apiVersion":"events.k8s.io/v1","kind":"Event","metadata":{"name":`))
		if r.code != http.StatusBadRequest {
			t.Fatalf("a truncated body: %d, want 400: %s", r.code, r.body)
		}
		failureStatus(t, r)

		after, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(after.Items) != len(before.Items) {
			t.Fatalf("%d events before the hostile requests, %d after", len(before.Items), len(after.Items))
		}
	})

	t.Run("both resources are discovered and described", func(t *testing.T) {
		out := n.mustKubectl("api-resources", "--api-group=events.k8s.io", "-o", "wide")
		if !strings.Contains(out, "events") || !strings.Contains(out, "ev") {
			t.Fatalf("kubectl api-resources --api-group=events.k8s.io:\n%s", out)
		}
		for path, want := range map[string]string{
			"/openapi/v3/api/v1":                "/api/v1/namespaces/{namespace}/events",
			"/openapi/v3/apis/events.k8s.io/v1": "/apis/events.k8s.io/v1/namespaces/{namespace}/events",
			"/openapi/v2":                       "io.k8s.api.events.v1.Event",
			"/metrics":                          `apiserver_storage_objects{resource="events"}`,
		} {
			r := do(t, n.httpClient(), http.MethodGet, n.url()+path, nil, nil)
			if r.code != http.StatusOK || !strings.Contains(string(r.body), want) {
				t.Fatalf("GET %s: %d, no %s", path, r.code, want)
			}
		}
	})
}

// TestE2EEventsExpire: an event is deleted by the leader, through the
// log, --event-ttl after its last write; a node restarted with a short TTL
// expires the events written before its restart (their TTL counts from its
// start, as etcd's leases restart on a new leader).
func TestE2EEventsExpire(t *testing.T) {
	n := startNode(t, "--event-ttl=1h")
	ctx := context.Background()
	create := func(cs kubernetes.Interface, name string) {
		t.Helper()
		ev := newEventAbout("default", name, corev1.ObjectReference{Kind: "Namespace", Name: "default", APIVersion: "v1"}, "Short", "expires")
		if _, err := cs.EventsV1().Events("default").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(cs kubernetes.Interface, name string) bool {
		_, err := cs.CoreV1().Events("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		return err == nil
	}
	cs := n.clientset()
	for i := range 3 {
		create(cs, fmt.Sprintf("before-restart-%d", i))
	}
	n.args = []string{"--event-ttl=2s"}
	n.restart()
	cs = n.clientset()
	for i := range 3 {
		name := fmt.Sprintf("before-restart-%d", i)
		waitFor(t, 30*time.Second, name+" to expire after the restart", func() bool { return !exists(cs, name) })
	}
	create(cs, "short-lived")
	waitFor(t, 30*time.Second, "an event to expire", func() bool { return !exists(cs, "short-lived") })
	if !strings.Contains(n.fullLog(), "starting event expiry: this node leads") {
		t.Fatal("the node's log does not show the expiry's term")
	}
}
