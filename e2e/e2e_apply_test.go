package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

// applyClient sends raw server-side applies and reads objects back as JSON.
type applyClient struct {
	t    *testing.T
	n    *node
	c    *http.Client
	base string // collection URL
}

func (a *applyClient) apply(name, manager, body string, query ...string) httpResult {
	a.t.Helper()
	q := []string{}
	if manager != "" {
		q = append(q, "fieldManager="+manager)
	}
	q = append(q, query...)
	return do(a.t, a.c, http.MethodPatch, a.base+"/"+name+"?"+strings.Join(q, "&"),
		map[string]string{"Content-Type": string(types.ApplyYAMLPatchType), "Accept": "application/json"}, []byte(body))
}

func (a *applyClient) patch(name, contentType, query, body string) httpResult {
	a.t.Helper()
	return do(a.t, a.c, http.MethodPatch, a.base+"/"+name+"?"+query, jsonHeader(contentType), []byte(body))
}

// cm decodes a ConfigMap answer, failing unless the code is want.
func decodeCM(t *testing.T, r httpResult, want int) *corev1.ConfigMap {
	t.Helper()
	if r.code != want {
		t.Fatalf("code %d, want %d: %s", r.code, want, r.body)
	}
	cm := &corev1.ConfigMap{}
	if err := json.Unmarshal(r.body, cm); err != nil {
		t.Fatal(err)
	}
	return cm
}

// owners maps each manager (with its operation and subresource) to the
// fields it owns, rendered as kube's fieldsV1 JSON.
func owners(obj metav1.Object) map[string]string {
	out := map[string]string{}
	for _, e := range obj.GetManagedFields() {
		k := e.Manager + "/" + string(e.Operation)
		if e.Subresource != "" {
			k += "/" + e.Subresource
		}
		if e.FieldsV1 != nil {
			out[k] = string(e.FieldsV1.Raw)
		} else {
			out[k] = ""
		}
	}
	return out
}

func managerNames(obj metav1.Object) []string {
	var out []string
	for k := range owners(obj) {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func cmApply(name string, data map[string]string, extraMeta string) string {
	d, _ := json.Marshal(data)
	return fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q%s},"data":%s}`, name, extraMeta, d)
}

// TestServerSideApply is the SSA conflict and ownership matrix on
// ConfigMaps: create by apply, no-op applies, conflicts with one cause per
// field, force, shared ownership, ownership given up by omission, Update
// entries of other writers, managedFields reset, uid mismatch, the required
// fieldManager, and the create permission an apply-create needs.
func TestServerSideApply(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	cs := n.clientset()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ssa"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := &applyClient{t: t, n: n, c: n.httpClient(), base: n.url() + "/api/v1/namespaces/ssa/configmaps"}

	t.Run("apply creates, then a repeat changes nothing", func(t *testing.T) {
		a.t = t
		cm := decodeCM(t, a.apply("c1", "alice", cmApply("c1", map[string]string{"a": "1"}, "")), http.StatusCreated)
		if cm.Data["a"] != "1" || cm.UID == "" {
			t.Fatalf("created %+v", cm)
		}
		mf := cm.ManagedFields
		if len(mf) != 1 || mf[0].Manager != "alice" || mf[0].Operation != metav1.ManagedFieldsOperationApply ||
			mf[0].APIVersion != "v1" || mf[0].FieldsType != "FieldsV1" || mf[0].Time == nil {
			t.Fatalf("managedFields %+v", mf)
		}
		if got := string(mf[0].FieldsV1.Raw); got != `{"f:data":{"f:a":{}}}` {
			t.Fatalf("fields %s", got)
		}
		// managedFields time stamps have one-second resolution: let the
		// clock pass a second so that the repeat carries a new one, which
		// must not count as a change.
		time.Sleep(1100 * time.Millisecond)
		again := decodeCM(t, a.apply("c1", "alice", cmApply("c1", map[string]string{"a": "1"}, "")), http.StatusOK)
		if again.ResourceVersion != cm.ResourceVersion {
			t.Fatalf("a no-op apply changed the resourceVersion %s -> %s", cm.ResourceVersion, again.ResourceVersion)
		}
	})

	t.Run("conflicts name each field, force takes them", func(t *testing.T) {
		a.t = t
		decodeCM(t, a.apply("c2", "alice", cmApply("c2", map[string]string{"a": "1", "b": "1", "c": "1"}, "")), http.StatusCreated)
		r := a.apply("c2", "bob", cmApply("c2", map[string]string{"a": "2"}, ""))
		st := wantStatus(t, r, http.StatusConflict, metav1.StatusReasonConflict, `Apply failed with 1 conflict: conflict with "alice": .data.a`)
		if st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Type != metav1.CauseTypeFieldManagerConflict ||
			st.Details.Causes[0].Field != ".data.a" || st.Details.Causes[0].Message != `conflict with "alice"` {
			t.Fatalf("causes %+v", st.Details)
		}
		r = a.apply("c2", "bob", cmApply("c2", map[string]string{"a": "2", "b": "2"}, ""))
		st = wantStatus(t, r, http.StatusConflict, metav1.StatusReasonConflict, "Apply failed with 2 conflicts: conflicts with \"alice\":\n- .data.a\n- .data.b")
		if len(st.Details.Causes) != 2 {
			t.Fatalf("causes %+v", st.Details.Causes)
		}
		// A conflict changes nothing.
		cm := decodeCM(t, do(t, a.c, http.MethodGet, a.base+"/c2", jsonHeader("application/json"), nil), http.StatusOK)
		if cm.Data["a"] != "1" {
			t.Fatalf("a conflicting apply wrote: %+v", cm.Data)
		}
		cm = decodeCM(t, a.apply("c2", "bob", cmApply("c2", map[string]string{"a": "2", "b": "2"}, ""), "force=true"), http.StatusOK)
		o := owners(cm)
		if cm.Data["a"] != "2" || cm.Data["b"] != "2" || o["bob/Apply"] != `{"f:data":{"f:a":{},"f:b":{}}}` || o["alice/Apply"] != `{"f:data":{"f:c":{}}}` {
			t.Fatalf("after force: data %v owners %v", cm.Data, o)
		}
		// force is only for apply.
		r = a.patch("c2", "application/merge-patch+json", "force=true", `{}`)
		wantStatus(t, r, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, `PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for non-apply patch`)
	})

	t.Run("shared ownership and giving fields up by omission", func(t *testing.T) {
		a.t = t
		decodeCM(t, a.apply("c3", "alice", cmApply("c3", map[string]string{"shared": "v", "mine": "1"}, "")), http.StatusCreated)
		cm := decodeCM(t, a.apply("c3", "bob", cmApply("c3", map[string]string{"shared": "v"}, "")), http.StatusOK)
		o := owners(cm)
		if o["alice/Apply"] != `{"f:data":{"f:mine":{},"f:shared":{}}}` || o["bob/Apply"] != `{"f:data":{"f:shared":{}}}` {
			t.Fatalf("shared owners %v", o)
		}
		// alice drops both: "mine" goes, "shared" stays with bob.
		cm = decodeCM(t, a.apply("c3", "alice", cmApply("c3", map[string]string{}, "")), http.StatusOK)
		if _, ok := cm.Data["mine"]; ok || cm.Data["shared"] != "v" {
			t.Fatalf("after omission: %v", cm.Data)
		}
		// bob drops the last claim on "shared": it goes too.
		cm = decodeCM(t, a.apply("c3", "bob", cmApply("c3", map[string]string{}, "")), http.StatusOK)
		if _, ok := cm.Data["shared"]; ok {
			t.Fatalf("after the last owner omitted it: %v", cm.Data)
		}
	})

	t.Run("other writes are Update entries, named by fieldManager or User-Agent", func(t *testing.T) {
		a.t = t
		cmObj, err := cs.CoreV1().ConfigMaps("ssa").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c4"}, Data: map[string]string{"x": "1"}},
			metav1.CreateOptions{FieldManager: "creator"})
		if err != nil {
			t.Fatal(err)
		}
		if o := owners(cmObj); o["creator/Update"] != `{"f:data":{".":{},"f:x":{}}}` {
			t.Fatalf("create owners %v", o)
		}
		hdr := jsonHeader("application/merge-patch+json")
		hdr["User-Agent"] = "my-agent/1.0 (linux)"
		r := do(t, a.c, http.MethodPatch, a.base+"/c4", hdr, []byte(`{"data":{"y":"2"}}`))
		cm := decodeCM(t, r, http.StatusOK)
		if o := owners(cm); o["my-agent/Update"] != `{"f:data":{"f:y":{}}}` {
			t.Fatalf("patch owners %v", o)
		}
		r = a.apply("c4", "alice", cmApply("c4", map[string]string{"y": "3"}, ""))
		wantStatus(t, r, http.StatusConflict, metav1.StatusReasonConflict, `Apply failed with 1 conflict: conflict with "my-agent" using v1: .data.y`)
		// An update by the same manager merges into its entry.
		cmObj, err = cs.CoreV1().ConfigMaps("ssa").Get(ctx, "c4", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cmObj.Data["z"] = "3"
		cmObj, err = cs.CoreV1().ConfigMaps("ssa").Update(ctx, cmObj, metav1.UpdateOptions{FieldManager: "creator"})
		if err != nil {
			t.Fatal(err)
		}
		if o := owners(cmObj); o["creator/Update"] != `{"f:data":{".":{},"f:x":{},"f:z":{}}}` || len(o) != 2 {
			t.Fatalf("update owners %v", o)
		}
	})

	t.Run("managedFields reset with [{}]", func(t *testing.T) {
		a.t = t
		for i, reset := range []struct{ contentType, body string }{
			{"application/merge-patch+json", `{"metadata":{"managedFields":[{}]}}`},
			{"application/json-patch+json", `[{"op":"replace","path":"/metadata/managedFields","value":[{}]}]`},
			{"application/strategic-merge-patch+json", `{"metadata":{"managedFields":[{}]}}`},
		} {
			name := fmt.Sprintf("reset-%d", i)
			decodeCM(t, a.apply(name, "alice", cmApply(name, map[string]string{"a": "1"}, "")), http.StatusCreated)
			cm := decodeCM(t, a.patch(name, reset.contentType, "", reset.body), http.StatusOK)
			if len(cm.ManagedFields) != 0 {
				t.Fatalf("%s: managedFields after reset %+v", reset.contentType, cm.ManagedFields)
			}
			// With no owner left, the first apply finds the existing
			// fields owned by kube's "before-first-apply" manager.
			wantStatus(t, a.apply(name, "bob", cmApply(name, map[string]string{"a": "2"}, "")), http.StatusConflict, metav1.StatusReasonConflict,
				`Apply failed with 1 conflict: conflict with "before-first-apply" using v1: .data.a`)
		}
		// An empty list resets too in kube 1.33, whose field manager reads
		// a non-nil empty list as a reset; the specification's older text
		// says it does not (docs/COMPATIBILITY.md). A client that omits
		// the field resets nothing.
		decodeCM(t, a.apply("reset-empty", "alice", cmApply("reset-empty", map[string]string{"a": "1"}, "")), http.StatusCreated)
		cm := decodeCM(t, a.patch("reset-empty", "application/merge-patch+json", "", `{"data":{"c":"3"}}`), http.StatusOK)
		if o := owners(cm); o["alice/Apply"] == "" {
			t.Fatalf("managedFields after a patch without them: %v", o)
		}
		cm = decodeCM(t, a.patch("reset-empty", "application/merge-patch+json", "", `{"metadata":{"managedFields":[]}}`), http.StatusOK)
		if o := owners(cm); len(o) != 0 {
			t.Fatalf("managedFields after an empty list: %v", o)
		}
		decodeCM(t, a.apply("reset-empty", "alice", cmApply("reset-empty", map[string]string{"a": "1"}, "")), http.StatusOK)
		// With other changes, the changes are made and the reset holds:
		// kube 1.33 records no owner for them (the specification's text
		// has the writer own them; docs/COMPATIBILITY.md).
		cm = decodeCM(t, a.patch("reset-empty", "application/merge-patch+json", "fieldManager=carol", `{"metadata":{"managedFields":[{}]},"data":{"b":"2"}}`), http.StatusOK)
		if o := owners(cm); len(o) != 0 || cm.Data["b"] != "2" {
			t.Fatalf("after a reset with a change: owners %v, data %v", o, cm.Data)
		}
		// And by update.
		decodeCM(t, a.apply("reset-put", "alice", cmApply("reset-put", map[string]string{"a": "1"}, "")), http.StatusCreated)
		cmObj, err := cs.CoreV1().ConfigMaps("ssa").Get(ctx, "reset-put", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cmObj.ManagedFields = []metav1.ManagedFieldsEntry{{}}
		cmObj, err = cs.CoreV1().ConfigMaps("ssa").Update(ctx, cmObj, metav1.UpdateOptions{})
		if err != nil || len(cmObj.ManagedFields) != 0 {
			t.Fatalf("update reset: %v %+v", err, cmObj)
		}
	})

	t.Run("uid mismatch", func(t *testing.T) {
		a.t = t
		r := a.apply("c5", "alice", cmApply("c5", nil, `,"uid":"0c3e5b1a-0000-4000-8000-000000000000"`))
		wantStatus(t, r, http.StatusConflict, metav1.StatusReasonConflict,
			`Operation cannot be fulfilled on configmaps "c5": uid mismatch: the provided object specified uid 0c3e5b1a-0000-4000-8000-000000000000, and no existing object was found`)
		decodeCM(t, a.apply("c5", "alice", cmApply("c5", nil, "")), http.StatusCreated)
		// On an existing object another uid is an immutable field change.
		r = a.apply("c5", "alice", cmApply("c5", nil, `,"uid":"0c3e5b1a-0000-4000-8000-000000000000"`))
		wantStatus(t, r, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, `ConfigMap "c5" is invalid: metadata.uid: Invalid value: "0c3e5b1a-0000-4000-8000-000000000000": field is immutable`)
	})

	t.Run("fieldManager is required, body must decode", func(t *testing.T) {
		a.t = t
		r := a.apply("c6", "", cmApply("c6", nil, ""))
		wantStatus(t, r, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			`PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch`)
		r = a.apply("c6", "alice", "{not yaml: [")
		wantStatus(t, r, http.StatusBadRequest, metav1.StatusReasonBadRequest, "error decoding YAML: *")
	})

	t.Run("YAML body", func(t *testing.T) {
		a.t = t
		body := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c7\ndata:\n  k: v\n"
		cm := decodeCM(t, a.apply("c7", "alice", body), http.StatusCreated)
		if cm.Data["k"] != "v" {
			t.Fatalf("data %v", cm.Data)
		}
	})

	t.Run("apply-create needs create permission", func(t *testing.T) {
		a.t = t
		createRole(t, cs, "ssa", "patcher", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "patch"}})
		bindRole(t, cs, "ssa", "patcher", "Role", "patcher", userSubject("patcher"))
		user := n.userClientset(t, "patcher").CoreV1().ConfigMaps("ssa")
		var err error
		waitFor(t, 10e9, "the patcher's role", func() bool {
			_, err = user.Apply(ctx, corev1ac.ConfigMap("c1", "ssa").WithData(map[string]string{"p": "1"}), metav1.ApplyOptions{FieldManager: "patcher"})
			return err == nil
		})
		_, err = user.Apply(ctx, corev1ac.ConfigMap("new-one", "ssa").WithData(map[string]string{"p": "1"}), metav1.ApplyOptions{FieldManager: "patcher"})
		wantAPIError(t, err, http.StatusForbidden, metav1.StatusReasonForbidden,
			`configmaps "new-one" is forbidden: User "patcher" cannot create resource "configmaps" in API group "" in the namespace "ssa"`)
		if _, err := cs.CoreV1().ConfigMaps("ssa").Get(ctx, "new-one", metav1.GetOptions{}); err == nil {
			t.Fatal("a forbidden apply created the object")
		}
	})
}

// TestServerSideApplyStatus checks that the status subresource is tracked
// apart from the object: its managers are recorded with subresource status,
// a main-resource apply does not own status fields and a status apply owns
// no spec fields (kube's reset fields).
func TestServerSideApplyStatus(t *testing.T) {
	n := startNode(t, "--controllers=false")
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := n.clientset().CoreV1().ServiceAccounts("default").Create(context.Background(), sa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := n.httpClient()
	base := n.url() + "/api/v1/namespaces/default/pods/p"
	hdr := map[string]string{"Content-Type": string(types.ApplyYAMLPatchType), "Accept": "application/json"}
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","labels":{"a":"b"}},
		"spec":{"containers":[{"name":"c","image":"nginx"}]},"status":{"message":"from main"}}`
	r := do(t, c, http.MethodPatch, base+"?fieldManager=deployer", hdr, []byte(pod))
	if r.code != http.StatusCreated {
		t.Fatalf("apply pod: %d %s", r.code, r.body)
	}
	var p corev1.Pod
	json.Unmarshal(r.body, &p)
	if p.Status.Message != "" {
		t.Fatalf("a main-resource apply set status: %+v", p.Status)
	}
	if f := owners(&p)["deployer/Apply"]; strings.Contains(f, "f:status") || !strings.Contains(f, "f:spec") {
		t.Fatalf("deployer owns %s", f)
	}
	status := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"status":{"message":"from status","conditions":[{"type":"Ready","status":"True"}]}}`
	r = do(t, c, http.MethodPatch, base+"/status?fieldManager=kubelet", hdr, []byte(status))
	if r.code != http.StatusOK {
		t.Fatalf("apply pod status: %d %s", r.code, r.body)
	}
	p = corev1.Pod{}
	json.Unmarshal(r.body, &p)
	o := owners(&p)
	if p.Status.Message != "from status" || !strings.Contains(o["kubelet/Apply/status"], "f:status") ||
		strings.Contains(o["kubelet/Apply/status"], "f:spec") || o["deployer/Apply"] == "" {
		t.Fatalf("after the status apply: status %+v owners %v", p.Status, o)
	}
	// The status manager does not conflict with the spec manager, and a
	// second status manager conflicts on the status field only.
	r = do(t, c, http.MethodPatch, base+"/status?fieldManager=other", hdr,
		[]byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"status":{"message":"other"}}`))
	wantStatus(t, r, http.StatusConflict, metav1.StatusReasonConflict, `Apply failed with 1 conflict: conflict with "kubelet" with subresource "status": .status.message`)
	// The status of a missing object is not created by apply.
	r = do(t, c, http.MethodPatch, n.url()+"/api/v1/namespaces/default/pods/missing/status?fieldManager=kubelet", hdr, []byte(status))
	wantStatus(t, r, http.StatusNotFound, metav1.StatusReasonNotFound, `pods "missing" not found`)
}

// TestKubectlApply checks client-side kubectl apply (the last-applied
// annotation), kubectl apply --server-side, and the migration from the
// first to the second with the manager kubectl, which raises no conflict.
func TestKubectlApply(t *testing.T) {
	n := startNode(t, "--controllers=false")
	dir := t.TempDir()
	write := func(name, value string) string {
		f := filepath.Join(dir, name+".yaml")
		y := fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: default\ndata:\n  key: %s\n  other: x\n", name, value)
		if err := os.WriteFile(f, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		return f
	}
	get := func(name string) *corev1.ConfigMap {
		cm, err := n.clientset().CoreV1().ConfigMaps("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return cm
	}

	// Client-side apply: create, then a change.
	n.mustKubectl("apply", "-f", write("csa", "one"))
	n.mustKubectl("apply", "-f", write("csa", "two"))
	cm := get("csa")
	if cm.Data["key"] != "two" || cm.Annotations[corev1.LastAppliedConfigAnnotation] == "" {
		t.Fatalf("client-side apply: %+v", cm)
	}
	if o := owners(cm); o["kubectl-client-side-apply/Update"] == "" {
		t.Fatalf("client-side apply owners %v", managerNames(cm))
	}

	// Migration to server-side apply with the manager kubectl: no conflict.
	out, err := n.kubectl("apply", "--server-side", "-f", write("csa", "three"))
	if err != nil {
		t.Fatalf("kubectl apply --server-side after client-side apply: %v\n%s", err, out)
	}
	cm = get("csa")
	if cm.Data["key"] != "three" {
		t.Fatalf("after migration: %+v", cm.Data)
	}
	if o := owners(cm); o["kubectl/Apply"] == "" || o["kubectl-client-side-apply/Update"] != "" {
		t.Fatalf("after migration owners %v", o)
	}

	// Server-side apply from the start, and a repeat that changes nothing.
	n.mustKubectl("apply", "--server-side", "-f", write("ssa", "one"))
	rv := get("ssa").ResourceVersion
	n.mustKubectl("apply", "--server-side", "-f", write("ssa", "one"))
	if got := get("ssa").ResourceVersion; got != rv {
		t.Fatalf("a repeated server-side apply changed the resourceVersion %s -> %s", rv, got)
	}
	// Another manager's change conflicts until forced.
	out, err = n.kubectl("apply", "--server-side", "--field-manager", "someone", "-f", write("ssa", "two"))
	if err == nil || !strings.Contains(out, "conflict") {
		t.Fatalf("conflicting kubectl apply: %v\n%s", err, out)
	}
	n.mustKubectl("apply", "--server-side", "--field-manager", "someone", "--force-conflicts", "-f", write("ssa", "two"))
	if get("ssa").Data["key"] != "two" {
		t.Fatal("forced apply did not land")
	}
	// kubectl's server-side dry run changes nothing.
	rv = get("ssa").ResourceVersion
	n.mustKubectl("apply", "--server-side", "--dry-run=server", "--field-manager", "someone", "-f", write("ssa", "three"))
	if cm := get("ssa"); cm.ResourceVersion != rv || cm.Data["key"] != "two" {
		t.Fatalf("a dry-run apply wrote: %+v", cm)
	}
}

// TestConcurrentStrategicMergePatches sends 100 strategic merge patches to
// one object at once, each adding its own key: the store's optimistic loop
// must re-apply each patch after a conflict, so that every one lands.
func TestConcurrentStrategicMergePatches(t *testing.T) {
	n := startNode(t, "--controllers=false")
	ctx := context.Background()
	cms := n.clientset().CoreV1().ConfigMaps("default")
	// The creator owns a field, so that managedFields are tracked from the
	// start (kube tracks none for an object created owning nothing).
	hot := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "hot"}, Data: map[string]string{"base": "x"}}
	if _, err := cms.Create(ctx, hot, metav1.CreateOptions{FieldManager: "creator"}); err != nil {
		t.Fatal(err)
	}
	const patches = 100
	errs := make(chan error, patches)
	for i := 0; i < patches; i++ {
		go func(i int) {
			body := fmt.Sprintf(`{"metadata":{"labels":{"l%d":"x"}},"data":{"k%d":"%d"}}`, i, i, i)
			_, err := cms.Patch(ctx, "hot", types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{FieldManager: fmt.Sprintf("m%d", i%8)})
			errs <- err
		}(i)
	}
	for i := 0; i < patches; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	cm, err := cms.Get(ctx, "hot", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < patches; i++ {
		if cm.Data[fmt.Sprintf("k%d", i)] != fmt.Sprint(i) || cm.Labels[fmt.Sprintf("l%d", i)] != "x" {
			t.Fatalf("patch %d did not land: data %v labels %v", i, cm.Data, cm.Labels)
		}
	}
	// Each of the eight managers owns exactly the keys it wrote.
	if len(cm.ManagedFields) != 9 {
		t.Fatalf("managers %v", managerNames(cm))
	}
	for _, e := range cm.ManagedFields {
		if e.Manager == "creator" {
			continue
		}
		var m int
		fmt.Sscanf(e.Manager, "m%d", &m)
		for i := 0; i < patches; i++ {
			owns := strings.Contains(string(e.FieldsV1.Raw), fmt.Sprintf(`"f:k%d":{}`, i))
			if owns != (i%8 == m) {
				t.Fatalf("manager %s owns k%d: %v (%s)", e.Manager, i, owns, e.FieldsV1.Raw)
			}
		}
	}
}

// TestServerSideApplyThroughFollower applies through a follower of a
// three-node cluster: the write is forwarded to the leader, which merges,
// so conflicts, the created answer and field validation warnings reach the
// client as if it had talked to the leader. It runs the forwarding mode
// (--execute-writes=leader); in the default the follower merges.
func TestServerSideApplyThroughFollower(t *testing.T) {
	nodes := startCluster(t, 3, "--controllers=false", "--execute-writes", "leader")
	leader := leaderOf(t, nodes)
	f := followersOf(nodes, leader)[0]
	a := &applyClient{t: t, n: f, c: f.httpClient(), base: f.url() + "/api/v1/namespaces/default/configmaps"}
	decodeCM(t, a.apply("fw", "alice", cmApply("fw", map[string]string{"a": "1"}, "")), http.StatusCreated)
	r := a.apply("fw", "bob", cmApply("fw", map[string]string{"a": "2"}, ""))
	wantStatus(t, r, http.StatusConflict, metav1.StatusReasonConflict, `Apply failed with 1 conflict: conflict with "alice": .data.a`)
	hdr := jsonHeader("application/merge-patch+json")
	hdr["User-Agent"] = "follower-client/0.1"
	r = do(t, a.c, http.MethodPatch, a.base+"/fw", hdr, []byte(`{"data":{"b":"1"},"bogus":1}`))
	cm := decodeCM(t, r, http.StatusOK)
	if w := warnings(t, r); len(w) != 1 || w[0] != `unknown field "bogus"` {
		t.Fatalf("warnings %q", w)
	}
	if o := owners(cm); o["follower-client/Update"] != `{"f:data":{"f:b":{}}}` || o["alice/Apply"] == "" {
		t.Fatalf("owners %v", o)
	}

	// A client that claims its write was forwarded already (a node's
	// header) is forwarded as any other client, not refused with the 503
	// meant for a write that met a leader change on its way.
	hdr = jsonHeader("application/json")
	hdr["X-Trustplane-Forwarded-By"] = "1"
	r = do(t, a.c, http.MethodPost, a.base, hdr, []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"fw-claimed"}}`))
	decodeCM(t, r, http.StatusCreated)
	if _, err := leader.clientset().CoreV1().ConfigMaps("default").Get(context.Background(), "fw-claimed", metav1.GetOptions{}); err != nil {
		t.Fatalf("the write a client claimed was forwarded is not on the leader: %v", err)
	}
}

// TestServerSideApplySpecRules: the specification's server-side apply rules
// that TestServerSideApply (rule 12 among them: managedFields reset) and
// TestKubectlApply leave out. Rule 3: an apply
// body may not carry managedFields, and an intent that makes no valid
// object fails. Rule 6: a shared field changed by one co-owner conflicts
// with the other. Rule 9: the merge markers of built-in kinds: a set
// (finalizers), a granular map (labels), a map list keyed by name (a
// Pod's containers) and an atomic list (a Role's rules). Rule 10: a map
// list a definition makes atomic is owned whole by each manager of an
// element. Rule 13: a field
// a client-side apply does not manage conflicts on migration, and another
// manager name opts out of the migration.
func TestServerSideApplySpecRules(t *testing.T) {
	n := startNode(t)
	n.scrub(t, "crd/listies.example.com")
	ctx := context.Background()
	cs := n.clientset()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ssa-rules"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	base := n.url() + "/api/v1/namespaces/ssa-rules/"
	a := &applyClient{t: t, n: n, c: n.httpClient(), base: base + "configmaps"}

	t.Run("rule 3: no managedFields in the body, and the intent must be valid", func(t *testing.T) {
		a.t = t
		r := a.apply("r3", "alice", cmApply("r3", map[string]string{"a": "1"}, `,"managedFields":[{"manager":"mallory","operation":"Apply"}]`))
		wantStatus(t, r, http.StatusBadRequest, metav1.StatusReasonBadRequest, "metadata.managedFields must be nil")
		r = a.apply("r3", "alice", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"r3","labels":{"bad key!":"x"}}}`)
		if r.code != http.StatusUnprocessableEntity {
			t.Fatalf("an invalid intent: %d %s", r.code, r.body)
		}
		if _, err := cs.CoreV1().ConfigMaps("ssa-rules").Get(ctx, "r3", metav1.GetOptions{}); err == nil {
			t.Fatal("a refused apply created the object")
		}
	})

	t.Run("rule 6: a shared field changed by a co-owner conflicts", func(t *testing.T) {
		a.t = t
		decodeCM(t, a.apply("r6", "alice", cmApply("r6", map[string]string{"shared": "v"}, "")), http.StatusCreated)
		decodeCM(t, a.apply("r6", "bob", cmApply("r6", map[string]string{"shared": "v"}, "")), http.StatusOK)
		wantStatus(t, a.apply("r6", "alice", cmApply("r6", map[string]string{"shared": "w"}, "")), http.StatusConflict, metav1.StatusReasonConflict,
			`Apply failed with 1 conflict: conflict with "bob": .data.shared`)
		wantStatus(t, a.apply("r6", "bob", cmApply("r6", map[string]string{"shared": "w"}, "")), http.StatusConflict, metav1.StatusReasonConflict,
			`Apply failed with 1 conflict: conflict with "alice": .data.shared`)
	})

	t.Run("rule 9: merge markers", func(t *testing.T) {
		a.t = t
		// A set (finalizers) and a granular map (labels): each manager's
		// elements are its own, and both sets of elements stay.
		decodeCM(t, a.apply("r9", "alice", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"r9","finalizers":["example.com/a"],"labels":{"a":"1"}}}`), http.StatusCreated)
		cm := decodeCM(t, a.apply("r9", "bob", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"r9","finalizers":["example.com/b"],"labels":{"b":"2"}}}`), http.StatusOK)
		if strings.Join(cm.Finalizers, ",") != "example.com/a,example.com/b" || cm.Labels["a"] != "1" || cm.Labels["b"] != "2" {
			t.Fatalf("a set and a granular map merged into %v %v", cm.Finalizers, cm.Labels)
		}
		if o := owners(cm); o["bob/Apply"] != `{"f:metadata":{"f:finalizers":{"v:\"example.com/b\"":{}},"f:labels":{"f:b":{}}}}` {
			t.Fatalf("bob owns %v", o)
		}
		cm = decodeCM(t, a.apply("r9", "alice", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"r9"}}`), http.StatusOK)
		if strings.Join(cm.Finalizers, ",") != "example.com/b" || cm.Labels["a"] != "" || cm.Labels["b"] != "2" {
			t.Fatalf("alice's elements removed by omission: %v %v", cm.Finalizers, cm.Labels)
		}
		cm.Finalizers = nil
		if _, err := cs.CoreV1().ConfigMaps("ssa-rules").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}

		// A map list keyed by name (a Pod's containers): managers own
		// their entries.
		pods := &applyClient{t: t, n: n, c: n.httpClient(), base: base + "pods"}
		pod := func(containers string) string {
			return `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"r9"},"spec":{"containers":[` + containers + `]}}`
		}
		if r := pods.apply("r9", "alice", pod(`{"name":"a","image":"busybox"}`)); r.code != http.StatusCreated {
			t.Fatalf("pod: %d %s", r.code, r.body)
		}
		r := pods.apply("r9", "bob", pod(`{"name":"a","image":"busybox"},{"name":"b","image":"busybox"}`))
		// Containers are immutable after create: kube refuses adding one,
		// after the merge decided what bob owns.
		if r.code != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "spec.containers: Forbidden: pod updates may not add or remove containers") {
			t.Fatalf("a second container on a running pod: %d %s", r.code, r.body)
		}
		r = pods.apply("r9", "bob", pod(`{"name":"a","image":"alpine"}`))
		wantStatus(t, r, http.StatusConflict, metav1.StatusReasonConflict, `Apply failed with 1 conflict: conflict with "alice": .spec.containers[name="a"].image`)

		// An atomic list (a Role's rules): one manager owns it whole.
		roles := &applyClient{t: t, n: n, c: n.httpClient(), base: n.url() + "/apis/rbac.authorization.k8s.io/v1/namespaces/ssa-rules/roles"}
		role := func(verbs string) string {
			return `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"Role","metadata":{"name":"r9"},"rules":[{"apiGroups":[""],"resources":["configmaps"],"verbs":[` + verbs + `]}]}`
		}
		if r := roles.apply("r9", "alice", role(`"get"`)); r.code != http.StatusCreated {
			t.Fatalf("role: %d %s", r.code, r.body)
		}
		r = roles.apply("r9", "bob", role(`"get","list"`))
		wantStatus(t, r, http.StatusConflict, metav1.StatusReasonConflict, `Apply failed with 1 conflict: conflict with "alice": .rules`)
	})

	t.Run("rule 10: a map list made atomic is owned whole", func(t *testing.T) {
		crd := func(listType string) string {
			keys := ""
			if listType == "map" {
				keys = "\n                x-kubernetes-list-map-keys: [name]"
			}
			return `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: listies.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: listies, singular: listy, kind: Listy}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              items:
                type: array
                x-kubernetes-list-type: ` + listType + keys + `
                items:
                  type: object
                  required: [name]
                  properties:
                    name: {type: string}
                    v: {type: integer}
`
		}
		write := manifests(t)
		n.mustKubectl("apply", "-f", write("crd-map", crd("map")))
		n.mustKubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/listies.example.com")
		l := &applyClient{t: t, n: n, c: n.httpClient(), base: n.url() + "/apis/example.com/v1/namespaces/ssa-rules/listies"}
		listy := func(items string) string {
			return `{"apiVersion":"example.com/v1","kind":"Listy","metadata":{"name":"r10"},"spec":{"items":[` + items + `]}}`
		}
		waitFor(t, 30*time.Second, "listies to be served", func() bool {
			return l.apply("r10", "alice", listy(`{"name":"a","v":1}`)).code == http.StatusCreated
		})
		// A map list: each manager owns its entry.
		if r := l.apply("r10", "bob", listy(`{"name":"b","v":2}`)); r.code != http.StatusOK {
			t.Fatalf("bob's entry: %d %s", r.code, r.body)
		}
		// Made atomic, the list has one owner per manager of an element:
		// any change to it conflicts with the other.
		n.mustKubectl("apply", "-f", write("crd-atomic", crd("atomic")))
		waitFor(t, 30*time.Second, "the atomic list to be served", func() bool {
			r := l.apply("r10", "alice", listy(`{"name":"a","v":1}`))
			return r.code == http.StatusConflict && strings.Contains(string(r.body), `conflict with \"bob\"`) && strings.Contains(string(r.body), ".spec.items")
		})
	})

	t.Run("rule 13: what a client-side apply does not manage conflicts on migration", func(t *testing.T) {
		dir := t.TempDir()
		write := func(value string) string {
			f := filepath.Join(dir, fmt.Sprintf("r13-%s.yaml", value))
			y := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: r13\n  namespace: ssa-rules\ndata:\n  key: " + value + "\n  other: x\n"
			if err := os.WriteFile(f, []byte(y), 0o600); err != nil {
				t.Fatal(err)
			}
			return f
		}
		n.mustKubectl("apply", "-f", write("one"))
		// Another writer changes a field the client-side apply manages.
		n.mustKubectl("patch", "configmap", "r13", "-n", "ssa-rules", "--type", "merge", "-p", `{"data":{"other":"changed"}}`)
		out, err := n.kubectl("apply", "--server-side", "-f", write("two"))
		if err == nil || !strings.Contains(out, `with "kubectl-patch"`) || !strings.Contains(out, ".data.other") {
			t.Fatalf("migration over a field another writer changed: %v\n%s", err, out)
		}
		// Another manager name opts out of the migration: the fields
		// the client-side apply manages conflict.
		out, err = n.kubectl("apply", "--server-side", "--field-manager", "other", "-f", write("three"))
		if err == nil || !strings.Contains(out, `with "kubectl-client-side-apply"`) || !strings.Contains(out, ".data.key") {
			t.Fatalf("a server-side apply under another manager: %v\n%s", err, out)
		}
	})
}
