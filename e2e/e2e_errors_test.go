package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TestBehaviour checks the generic object rules through client-go: names,
// uids, timestamps, resourceVersions and the Status errors kube returns.
func TestBehaviour(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	cs := n.clientset()
	sas := cs.CoreV1().ServiceAccounts("default")

	t.Run("generateName", func(t *testing.T) {
		re := regexp.MustCompile(`^gen-[a-z0-9]{5}$`)
		seen := map[string]bool{}
		for i := 0; i < 50; i++ {
			sa, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{GenerateName: "gen-"}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("create %d: %v", i, err)
			}
			if !re.MatchString(sa.Name) || seen[sa.Name] {
				t.Fatalf("generated name %q (seen before: %v)", sa.Name, seen[sa.Name])
			}
			if sa.GenerateName != "gen-" {
				t.Fatalf("generateName not kept: %q", sa.GenerateName)
			}
			seen[sa.Name] = true
		}
		list, err := sas.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, sa := range list.Items {
			if seen[sa.Name] {
				found++
			}
		}
		if found != len(seen) {
			t.Fatalf("listed %d of %d generated service accounts", found, len(seen))
		}
	})

	t.Run("metadata and resourceVersions", func(t *testing.T) {
		before := time.Now().Add(-2 * time.Second)
		var last uint64
		uids := map[string]bool{}
		for _, name := range []string{"meta-a", "meta-b", "meta-c"} {
			sa, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if sa.UID == "" || uids[string(sa.UID)] {
				t.Fatalf("uid %q missing or reused", sa.UID)
			}
			uids[string(sa.UID)] = true
			if sa.CreationTimestamp.Time.Before(before) || sa.CreationTimestamp.Time.After(time.Now().Add(2*time.Second)) {
				t.Fatalf("creationTimestamp %v is not now", sa.CreationTimestamp)
			}
			rv := rvOf(t, sa)
			if rv <= last {
				t.Fatalf("resourceVersion %d after %d: not increasing", rv, last)
			}
			last = rv
		}
		// An update gets a new, higher resourceVersion (the raft index
		// of its log entry); the list's resourceVersion is not older.
		sa, _ := sas.Get(ctx, "meta-a", metav1.GetOptions{})
		sa.Labels = map[string]string{"x": "y"}
		up, err := sas.Update(ctx, sa, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rvOf(t, up) <= last || up.UID != sa.UID || !up.CreationTimestamp.Equal(&sa.CreationTimestamp) {
			t.Fatalf("update: rv %s after %d, uid %s/%s", up.ResourceVersion, last, up.UID, sa.UID)
		}
		list, err := sas.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if rvOf(t, &list.ListMeta) < rvOf(t, up) {
			t.Fatalf("list resourceVersion %s older than the last write %s", list.ResourceVersion, up.ResourceVersion)
		}
		// Client-set uid and creationTimestamp are ignored on create.
		odd := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "meta-d", UID: "not-a-server-uid",
			CreationTimestamp: metav1.NewTime(time.Unix(1000, 0)), ResourceVersion: ""}}
		got, err := sas.Create(ctx, odd, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.UID == "not-a-server-uid" || got.CreationTimestamp.Time.Year() < 2000 {
			t.Fatalf("client-set system fields kept: uid %s creationTimestamp %v", got.UID, got.CreationTimestamp)
		}
	})

	t.Run("AlreadyExists", func(t *testing.T) {
		if _, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
		st := wantAPIError(t, err, http.StatusConflict, metav1.StatusReasonAlreadyExists, `serviceaccounts "x" already exists`)
		if st.Details == nil || st.Details.Name != "x" || st.Details.Kind != "serviceaccounts" {
			t.Fatalf("details %+v", st.Details)
		}
	})

	t.Run("dry-run create", func(t *testing.T) {
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		sa, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "dry"}}, dry)
		if err != nil || sa.Name != "dry" || sa.UID == "" {
			t.Fatalf("dry-run create: %v %+v", err, sa)
		}
		if _, err := sas.Get(ctx, "dry", metav1.GetOptions{}); err == nil {
			t.Fatalf("a dry-run create was stored")
		}
		// The name must still be free, as kube's dry-run storage checks.
		_, err = sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "meta-a"}}, dry)
		wantAPIError(t, err, http.StatusConflict, metav1.StatusReasonAlreadyExists, `serviceaccounts "meta-a" already exists`)
	})

	t.Run("NotFound", func(t *testing.T) {
		_, err := sas.Get(ctx, "x-missing", metav1.GetOptions{})
		st := wantAPIError(t, err, http.StatusNotFound, metav1.StatusReasonNotFound, `serviceaccounts "x-missing" not found`)
		if st.Details == nil || st.Details.Name != "x-missing" || st.Details.Kind != "serviceaccounts" {
			t.Fatalf("details %+v", st.Details)
		}
		_, err = cs.CoreV1().ServiceAccounts("nope").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{})
		wantAPIError(t, err, http.StatusNotFound, metav1.StatusReasonNotFound, `namespaces "nope" not found`)
		_, err = cs.CoreV1().Namespaces().Get(ctx, "nope", metav1.GetOptions{})
		wantAPIError(t, err, http.StatusNotFound, metav1.StatusReasonNotFound, `namespaces "nope" not found`)
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "x-missing"}}
		_, err = sas.Update(ctx, sa, metav1.UpdateOptions{})
		wantAPIError(t, err, http.StatusNotFound, metav1.StatusReasonNotFound, `serviceaccounts "x-missing" not found`)
		_, err = sas.Patch(ctx, "x-missing", "application/merge-patch+json", []byte(`{}`), metav1.PatchOptions{})
		wantAPIError(t, err, http.StatusNotFound, metav1.StatusReasonNotFound, `serviceaccounts "x-missing" not found`)
	})

	t.Run("terminating namespace refuses new content", func(t *testing.T) {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "doomed"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Content held by a finalizer keeps the namespace Terminating
		// while the namespace controller runs.
		if _, err := cs.CoreV1().ConfigMaps("doomed").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pin", Finalizers: []string{"example.com/hold"}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cs.CoreV1().Namespaces().Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		ns, err := cs.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
		if err != nil || ns.Status.Phase != corev1.NamespaceTerminating || ns.DeletionTimestamp == nil {
			t.Fatalf("deleted namespace: %v %+v", err, ns)
		}
		if len(ns.Spec.Finalizers) != 1 || ns.Spec.Finalizers[0] != corev1.FinalizerKubernetes {
			t.Fatalf("namespace finalizers %v", ns.Spec.Finalizers)
		}
		_, err = cs.CoreV1().ServiceAccounts("doomed").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{})
		wantAPIError(t, err, http.StatusForbidden, metav1.StatusReasonForbidden,
			`serviceaccounts "a" is forbidden: unable to create new content in namespace doomed because it is being terminated`)
		// Deleting it again changes nothing it decides (the namespace
		// controller may meanwhile write status conditions).
		if err := cs.CoreV1().Namespaces().Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		again, err := cs.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
		if err != nil || !again.DeletionTimestamp.Equal(ns.DeletionTimestamp) || again.Status.Phase != corev1.NamespaceTerminating ||
			len(again.Finalizers) != 0 || len(again.Spec.Finalizers) != 1 {
			t.Fatalf("second delete of a terminating namespace: %v, %+v", err, again)
		}
		// Once the content's finalizer goes, the namespace controller
		// finishes the deletion.
		if _, err := cs.CoreV1().ConfigMaps("doomed").Patch(ctx, "pin", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 90*time.Second, "namespace doomed to go", func() bool {
			_, err := cs.CoreV1().Namespaces().Get(ctx, "doomed", metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		})
	})

	t.Run("Conflict on a stale resourceVersion", func(t *testing.T) {
		sa, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "conflict"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stale := sa.DeepCopy()
		sa.Labels = map[string]string{"v": "1"}
		if _, err := sas.Update(ctx, sa, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		stale.Labels = map[string]string{"v": "stale"}
		_, err = sas.Update(ctx, stale, metav1.UpdateOptions{})
		st := wantAPIError(t, err, http.StatusConflict, metav1.StatusReasonConflict,
			`Operation cannot be fulfilled on serviceaccounts "conflict": the object has been modified; please apply your changes to the latest version and try again`)
		if st.Details == nil || st.Details.Name != "conflict" || st.Details.Kind != "serviceaccounts" {
			t.Fatalf("details %+v", st.Details)
		}
		got, _ := sas.Get(ctx, "conflict", metav1.GetOptions{})
		if got.Labels["v"] != "1" {
			t.Fatalf("stale update was applied: %v", got.Labels)
		}
		// A merge patch carrying a stale resourceVersion conflicts too.
		_, err = sas.Patch(ctx, "conflict", "application/merge-patch+json",
			[]byte(`{"metadata":{"resourceVersion":"`+stale.ResourceVersion+`","labels":{"v":"2"}}}`), metav1.PatchOptions{})
		wantAPIError(t, err, http.StatusConflict, metav1.StatusReasonConflict, "*")
	})

	t.Run("unconditional update", func(t *testing.T) {
		sa, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "uncond"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		up := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "uncond", Labels: map[string]string{"u": "1"}}}
		got, err := sas.Update(ctx, up, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("PUT without resourceVersion: %v", err)
		}
		if got.Labels["u"] != "1" || rvOf(t, got) <= rvOf(t, sa) || got.UID != sa.UID {
			t.Fatalf("unconditional update: %+v", got.ObjectMeta)
		}
	})

	t.Run("no-op update keeps the resourceVersion", func(t *testing.T) {
		sa, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "noop", Labels: map[string]string{"a": "b"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		same, err := sas.Update(ctx, sa, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if same.ResourceVersion != sa.ResourceVersion {
			t.Fatalf("no-op update: rv %s -> %s", sa.ResourceVersion, same.ResourceVersion)
		}
		same, err = sas.Patch(ctx, "noop", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"a":"b"}}}`), metav1.PatchOptions{})
		if err != nil || same.ResourceVersion != sa.ResourceVersion {
			t.Fatalf("no-op patch: %v, rv %s -> %s", err, sa.ResourceVersion, same.ResourceVersion)
		}
	})

	t.Run("Invalid carries field causes", func(t *testing.T) {
		_, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "Bad_Name"}}, metav1.CreateOptions{})
		st := wantAPIError(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			`ServiceAccount "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of *`)
		if st.Details == nil || st.Details.Kind != "ServiceAccount" || st.Details.Name != "Bad_Name" || len(st.Details.Causes) != 1 {
			t.Fatalf("details %+v", st.Details)
		}
		if c := st.Details.Causes[0]; c.Type != metav1.CauseTypeFieldValueInvalid || c.Field != "metadata.name" {
			t.Fatalf("cause %+v", c)
		}
		_, err = cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"},
			Data: map[string]string{"bad key!": "v"}}, metav1.CreateOptions{})
		st = wantAPIError(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, `ConfigMap "cm" is invalid: data[bad key!]: Invalid value: "bad key!": *`)
		if len(st.Details.Causes) != 1 || st.Details.Causes[0].Field != "data[bad key!]" {
			t.Fatalf("causes %+v", st.Details.Causes)
		}
	})
}

// badRequest is one request that must fail without changing anything.
type badRequest struct {
	name    string
	method  string
	path    string
	header  map[string]string
	body    []byte
	code    int
	reason  metav1.StatusReason
	message string // "" any, trailing "*" a prefix
}

// TestBadInput sends malformed and refused requests with raw HTTP: each
// answers a kube Status with the right code, reason and message, none of
// them changes the stored objects, and the node stays ready.
func TestBadInput(t *testing.T) {
	n := startNode(t)
	n.scrub(t, "sa/a", "cm/cm", "pod/p", "svc/s")
	ctx := context.Background()
	cs := n.clientset()
	if _, err := cs.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods("default").Create(ctx, minimalPod("p"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	resources := []string{"serviceaccounts", "configmaps", "secrets", "pods", "namespaces", "podtemplates", "services"}
	before := n.snapshot(t, resources...)

	const sa = "/api/v1/namespaces/default/serviceaccounts"
	const cmPath = "/api/v1/namespaces/default/configmaps"
	js := "application/json"
	big := append(append([]byte(`{"metadata":{"name":"big"},"data":{"a":"`), bytes.Repeat([]byte("x"), 3<<20)...), `"}}`...)
	cases := []badRequest{
		{"create: name in body differs on PUT", http.MethodPut, sa + "/a", jsonHeader(js), []byte(`{"metadata":{"name":"b"}}`),
			400, metav1.StatusReasonBadRequest, "the name of the object (b) does not match the name on the URL (a)"},
		{"create: namespace in body differs", http.MethodPost, sa, jsonHeader(js), []byte(`{"metadata":{"name":"b","namespace":"kube-system"}}`),
			400, metav1.StatusReasonBadRequest, "the namespace of the provided object does not match the namespace sent on the request"},
		{"update: namespace in body differs", http.MethodPut, sa + "/a", jsonHeader(js), []byte(`{"metadata":{"name":"a","namespace":"kube-system"}}`),
			400, metav1.StatusReasonBadRequest, "the namespace of the provided object does not match the namespace sent on the request"},
		{"patch: changes the name", http.MethodPatch, sa + "/a", jsonHeader("application/merge-patch+json"), []byte(`{"metadata":{"name":"b"}}`),
			400, metav1.StatusReasonBadRequest, "the name of the object (b) does not match the name on the URL (a)"},
		{"wrong kind in body", http.MethodPost, sa, jsonHeader(js), []byte(`{"kind":"Secret","apiVersion":"v1","metadata":{"name":"b"}}`),
			400, metav1.StatusReasonBadRequest, `Secret in version "v1" cannot be handled as a ServiceAccount: *`},
		{"wrong apiVersion in body", http.MethodPost, sa, jsonHeader(js), []byte(`{"kind":"ServiceAccount","apiVersion":"v2","metadata":{"name":"b"}}`),
			400, metav1.StatusReasonBadRequest, `ServiceAccount in version "v2" cannot be handled as a ServiceAccount: no kind "ServiceAccount" is registered for version "v2" *`},
		{"wrong kind on update", http.MethodPut, sa + "/a", jsonHeader(js), []byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a"}}`),
			400, metav1.StatusReasonBadRequest, `ConfigMap in version "v1" cannot be handled as a ServiceAccount: *`},
		{"undecodable JSON", http.MethodPost, sa, jsonHeader(js), []byte(`{"kind":"ServiceAccount",`),
			400, metav1.StatusReasonBadRequest, `the object provided is unrecognized (must be of type ServiceAccount): *`},
		{"undecodable protobuf", http.MethodPost, sa, jsonHeader("application/vnd.kubernetes.protobuf"), []byte("not protobuf at all"),
			400, metav1.StatusReasonBadRequest, `the object provided is unrecognized (must be of type ServiceAccount): *`},
		{"wrong type of a field", http.MethodPost, sa, jsonHeader(js), []byte(`{"metadata":{"name":"b"},"secrets":"not-a-list"}`),
			400, metav1.StatusReasonBadRequest, `ServiceAccount in version "v1" cannot be handled as a ServiceAccount: *`},
		{"unknown field with fieldValidation=Strict", http.MethodPost, sa + "?fieldValidation=Strict", jsonHeader(js), []byte(`{"metadata":{"name":"b"},"bogus":1}`),
			400, metav1.StatusReasonBadRequest, `ServiceAccount in version "v1" cannot be handled as a ServiceAccount: strict decoding error: unknown field "bogus"`},
		{"bad fieldValidation value", http.MethodPost, sa + "?fieldValidation=Loose", jsonHeader(js), []byte(`{"metadata":{"name":"b"}}`),
			422, metav1.StatusReasonInvalid, `CreateOptions.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: "Loose": *`},
		{"invalid name", http.MethodPost, sa, jsonHeader(js), []byte(`{"metadata":{"name":"Bad_Name"}}`),
			422, metav1.StatusReasonInvalid, `ServiceAccount "Bad_Name" is invalid: *`},
		{"already exists", http.MethodPost, sa, jsonHeader(js), []byte(`{"metadata":{"name":"a"}}`),
			409, metav1.StatusReasonAlreadyExists, `serviceaccounts "a" already exists`},
		{"stale resourceVersion", http.MethodPut, sa + "/a", jsonHeader(js), []byte(`{"metadata":{"name":"a","resourceVersion":"1"}}`),
			409, metav1.StatusReasonConflict, `Operation cannot be fulfilled on serviceaccounts "a": the object has been modified; please apply your changes to the latest version and try again`},
		{"unsupported media type", http.MethodPost, sa, jsonHeader("application/xml"), []byte(`<sa/>`),
			415, metav1.StatusReasonUnsupportedMediaType, "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf"},
		{"unsupported patch type", http.MethodPatch, sa + "/a", jsonHeader(js), []byte(`{}`),
			415, metav1.StatusReasonUnsupportedMediaType, "415: Unsupported Media Type"},
		{"body over 3 MiB", http.MethodPost, cmPath, jsonHeader(js), big,
			413, metav1.StatusReasonRequestEntityTooLarge, "Request entity too large: limit is 3145728"},
		{"undecodable merge patch", http.MethodPatch, sa + "/a", jsonHeader("application/merge-patch+json"), []byte(`{bad`),
			400, metav1.StatusReasonBadRequest, "error decoding patch: *"},
		{"undecodable JSON patch", http.MethodPatch, sa + "/a", jsonHeader("application/json-patch+json"), []byte(`{"op":"add"}`),
			400, metav1.StatusReasonBadRequest, "error decoding patch: json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp"},
		{"resourceVersion set on create", http.MethodPost, sa, jsonHeader(js), []byte(`{"metadata":{"name":"b","resourceVersion":"5"}}`),
			500, "", "resourceVersion should not be set on objects to be created"},
		{"JSON patch test fails", http.MethodPatch, sa + "/a", jsonHeader("application/json-patch+json"),
			[]byte(`[{"op":"test","path":"/metadata/name","value":"zz"},{"op":"add","path":"/metadata/labels","value":{"x":"y"}}]`),
			422, metav1.StatusReasonInvalid, "the server rejected our request due to an error in our request"},
		{"JSON patch on a missing path", http.MethodPatch, sa + "/a", jsonHeader("application/json-patch+json"),
			[]byte(`[{"op":"replace","path":"/spec/nothing","value":1}]`),
			422, metav1.StatusReasonInvalid, "the server rejected our request due to an error in our request"},
		{"strategic merge patch with unknown field, Strict", http.MethodPatch, sa + "/a?fieldValidation=Strict", jsonHeader("application/strategic-merge-patch+json"),
			[]byte(`{"bogus":1}`), 400, metav1.StatusReasonBadRequest, `ServiceAccount in version "v1" cannot be handled as a ServiceAccount: strict decoding error: unknown field "bogus"`},
		{"patch makes the object invalid", http.MethodPatch, cmPath + "/cm", jsonHeader("application/merge-patch+json"),
			[]byte(`{"data":{"bad key!":"v"}}`), 422, metav1.StatusReasonInvalid, `ConfigMap "cm" is invalid: *`},
		{"get of a missing object", http.MethodGet, sa + "/missing", nil, nil,
			404, metav1.StatusReasonNotFound, `serviceaccounts "missing" not found`},
		{"delete of a missing object", http.MethodDelete, sa + "/missing", nil, nil,
			404, metav1.StatusReasonNotFound, `serviceaccounts "missing" not found`},
		{"create in a missing namespace", http.MethodPost, "/api/v1/namespaces/nope/serviceaccounts", jsonHeader(js), []byte(`{"metadata":{"name":"a"}}`),
			404, metav1.StatusReasonNotFound, `namespaces "nope" not found`},
		{"delete with a stale precondition", http.MethodDelete, sa + "/a", jsonHeader(js), []byte(`{"preconditions":{"resourceVersion":"1"}}`),
			409, metav1.StatusReasonConflict, `Operation cannot be fulfilled on ServiceAccount "a": the ResourceVersion in the precondition (1) does not match the ResourceVersion in record (*`},
		{"delete with a wrong uid precondition", http.MethodDelete, cmPath + "/cm", jsonHeader(js), []byte(`{"preconditions":{"uid":"0000"}}`),
			409, metav1.StatusReasonConflict, `Operation cannot be fulfilled on ConfigMap "cm": the UID in the precondition (0000) does not match the UID in record (*`},
		{"delete with an undecodable body", http.MethodDelete, cmPath + "/cm", jsonHeader(js), []byte(`{"preconditions":`),
			400, metav1.StatusReasonBadRequest, ""},
		{"create a service", http.MethodPost, "/api/v1/namespaces/default/services", jsonHeader(js), []byte(`{"metadata":{"name":"s"},"spec":{"ports":[{"port":80}]}}`),
			405, metav1.StatusReasonMethodNotAllowed, `create is not supported on resources of kind "services"`},
		{"deletecollection of namespaces", http.MethodDelete, "/api/v1/namespaces", nil, nil,
			405, metav1.StatusReasonMethodNotAllowed, "the server does not allow this method on the requested resource"},
		{"POST to an item path", http.MethodPost, sa + "/a", jsonHeader(js), []byte(`{"metadata":{"name":"b"}}`),
			405, metav1.StatusReasonMethodNotAllowed, "the server does not allow this method on the requested resource"},
		{"PUT to a collection path", http.MethodPut, sa, jsonHeader(js), []byte(`{"metadata":{"name":"a"}}`),
			405, metav1.StatusReasonMethodNotAllowed, "the server does not allow this method on the requested resource"},
		{"PATCH to a collection path", http.MethodPatch, sa, jsonHeader("application/merge-patch+json"), []byte(`{}`),
			405, metav1.StatusReasonMethodNotAllowed, "the server does not allow this method on the requested resource"},
		{"POST across namespaces", http.MethodPost, "/api/v1/serviceaccounts", jsonHeader(js), []byte(`{"metadata":{"name":"b","namespace":"default"}}`),
			405, metav1.StatusReasonMethodNotAllowed, "the server does not allow this method on the requested resource"},
		{"DELETE across namespaces", http.MethodDelete, "/api/v1/serviceaccounts", nil, nil,
			405, metav1.StatusReasonMethodNotAllowed, "the server does not allow this method on the requested resource"},
		{"a namespaced item without its namespace", http.MethodGet, "/api/v1/serviceaccounts/a", nil, nil,
			404, metav1.StatusReasonNotFound, "the server could not find the requested resource"},
		{"POST to a namespace's path", http.MethodPost, "/api/v1/namespaces/default", jsonHeader(js), []byte(`{"metadata":{"name":"x"}}`),
			405, metav1.StatusReasonMethodNotAllowed, "the server does not allow this method on the requested resource"},
		{"bad label selector", http.MethodGet, sa + "?labelSelector=a%3D%3D%3Db", nil, nil,
			400, metav1.StatusReasonBadRequest, ""},
		{"bad field selector", http.MethodGet, sa + "?fieldSelector=spec.nothing%3Dx", nil, nil,
			400, metav1.StatusReasonBadRequest, `"spec.nothing" is not a known field selector: only "metadata.name", "metadata.namespace"`},
		{"unknown resource", http.MethodGet, "/api/v1/nothings", nil, nil,
			404, metav1.StatusReasonNotFound, "the server could not find the requested resource"},
		{"unknown subresource", http.MethodGet, sa + "/a/nothing", nil, nil,
			404, metav1.StatusReasonNotFound, "the server could not find the requested resource"},
		{"POST to an unknown path", http.MethodPost, "/api/v1/namespaces/default/nothings", jsonHeader(js), []byte(`{}`),
			404, metav1.StatusReasonNotFound, "the server could not find the requested resource"},
		{"not acceptable", http.MethodGet, sa, map[string]string{"Accept": "application/xml"}, nil,
			406, metav1.StatusReasonNotAcceptable, "406: Not Acceptable\n\nAvailable representations: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch"},
		{"not acceptable on get", http.MethodGet, sa + "/a", map[string]string{"Accept": "text/html, application/*"}, nil,
			406, metav1.StatusReasonNotAcceptable, "406: Not Acceptable\n\nAvailable representations: application/json, application/yaml, application/vnd.kubernetes.protobuf"},
		{"not acceptable on create", http.MethodPost, sa, map[string]string{"Accept": "application/xml", "Content-Type": js}, []byte(`{"metadata":{"name":"b"}}`),
			406, metav1.StatusReasonNotAcceptable, "406: Not Acceptable\n\nAvailable representations: application/json, application/yaml, application/vnd.kubernetes.protobuf"},
		{"a Table in a group that has none passes the route, then kube's negotiation refuses it", http.MethodGet, sa, map[string]string{"Accept": "application/json;as=Table;g=example.com;v=v1"}, nil,
			406, metav1.StatusReasonNotAcceptable, "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"},
	}
	c := n.httpClient()
	// Where trustplane knowingly differs from kube-apiserver
	// (docs/COMPATIBILITY.md), the case checks trustplane only.
	own := map[string]string{
		"create a service":                                 "Services are read-only, default/kubernetes alone; kube-apiserver creates the Service",
		"delete with an undecodable body":                  "a DELETE body that does not decode is 400; kube-apiserver answers 500",
		"strategic merge patch with unknown field, Strict": "fieldValidation=Strict is 400 on patches too, as the specification says; kube-apiserver answers 422",
	}
	for _, bc := range cases {
		t.Run(bc.name, func(t *testing.T) {
			if what, ok := own[bc.name]; ok {
				n.trustplaneOnly(t, what)
			}
			r := do(t, c, bc.method, n.url()+bc.path, bc.header, bc.body)
			wantStatus(t, r, bc.code, bc.reason, bc.message)
		})
	}
	// Outside every served group kube-apiserver's mux answers in plain
	// text; under a served group (an unknown version of it too) go-restful
	// answers with a Status.
	for _, path := range []string{"/apis/certificates.k8s.io/v9", "/apis/certificates.k8s.io/v9/things", "/api/v9", "/api/v9/things"} {
		wantStatus(t, do(t, c, http.MethodGet, n.url()+path, nil, nil), 404, metav1.StatusReasonNotFound, "the server could not find the requested resource")
	}
	for _, path := range []string{"/apis/example.com/v1/things", "/apis/example.com/v1", "/apis/example.com", "/nothing/here"} {
		r := do(t, c, http.MethodGet, n.url()+path, nil, nil)
		if r.code != 404 || string(r.body) != "404 page not found\n" || r.header.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Errorf("GET %s: %d %q (%s), want kube's plain-text 404", path, r.code, r.body, r.header.Get("Content-Type"))
		}
	}
	after := n.snapshot(t, resources...)
	sameSnapshot(t, before, after)
	n.mustBeReady(t)

	// Without credentials: 401 with a Status, for reads and writes alike
	// (kube-apiserver with --anonymous-auth, its default: 403 for
	// system:anonymous; docs/COMPATIBILITY.md).
	anon := n.anonClient()
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodDelete} {
		if !n.isTrustplane() {
			break
		}
		r := do(t, anon, m, n.url()+sa, jsonHeader(js), []byte(`{"metadata":{"name":"anon"}}`))
		wantStatus(t, r, 401, metav1.StatusReasonUnauthorized, "Unauthorized")
	}
	sameSnapshot(t, before, n.snapshot(t, resources...))

	// A client that accepts only protobuf gets its Status in protobuf.
	r := do(t, c, http.MethodGet, n.url()+sa+"/missing", map[string]string{"Accept": "application/vnd.kubernetes.protobuf"}, nil)
	if r.code != 404 || !bytes.HasPrefix(r.body, []byte{0x6b, 0x38, 0x73, 0x00}) {
		t.Fatalf("protobuf 404: %d %q", r.code, r.body)
	}
	var st metav1.Status
	if err := json.Unmarshal(r.body, &st); err == nil {
		t.Fatalf("a protobuf Status decoded as JSON")
	}
	if !strings.Contains(r.header.Get("Content-Type"), "protobuf") {
		t.Fatalf("protobuf Status Content-Type %q", r.header.Get("Content-Type"))
	}
}
