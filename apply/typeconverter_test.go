package apply

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"
	"k8s.io/kubernetes/pkg/registry/core/pod"
	"sigs.k8s.io/structured-merge-diff/v4/fieldpath"
)

// kubeFieldManager is the FieldManager kube-apiserver builds, with kube's
// TypeConverter as it is (no unstructuredFirst): what NewFieldManager's
// must agree with.
func kubeFieldManager(t testing.TB, kind, sub string, strategy any) *managedfields.FieldManager {
	t.Helper()
	var reset map[fieldpath.APIVersion]fieldpath.Filter
	if rs, ok := strategy.(interface {
		GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set
	}); ok {
		reset = fieldpath.NewExcludeFilterSetMap(rs.GetResetFields())
	}
	fm, err := managedfields.NewDefaultFieldManager(typeConverter(t), runtime.UnsafeObjectConvertor(legacyscheme.Scheme),
		legacyscheme.Scheme, legacyscheme.Scheme, schema.GroupVersionKind{Version: "v1", Kind: kind},
		schema.GroupVersion{Version: runtime.APIVersionInternal}, sub, reset)
	if err != nil {
		t.Fatal(err)
	}
	return fm
}

// sameResult fails unless two FieldManager results are the same object (the
// managedFields time stamps aside: each call reads the clock) or the same
// error.
func sameResult(t *testing.T, step string, got, want runtime.Object, gotErr, wantErr error) {
	t.Helper()
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) && !sameErrorKind(gotErr, wantErr) {
		t.Fatalf("%s: error %v, kube's %v", step, gotErr, wantErr)
	}
	if gotErr != nil {
		return
	}
	for _, o := range []runtime.Object{got, want} {
		m, err := meta.Accessor(o)
		if err != nil {
			t.Fatal(err)
		}
		mf := m.GetManagedFields()
		for i := range mf {
			mf[i].Time = nil
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%s: result\n%#v\nkube's\n%#v", step, got, want)
	}
}

// TestUnstructuredFirstSameResults: NewFieldManager's FieldManager, which
// hands objects with managedFields to structured-merge-diff as maps, gives
// kube's results, step by step through applies (first, repeated, pruning,
// conflicting, forced), updates and status writes on Pods and ConfigMaps.
func TestUnstructuredFirstSameResults(t *testing.T) {
	type step struct {
		name    string
		apply   string // an apply body, or
		update  func(runtime.Object) runtime.Object
		manager string
		force   bool
		status  bool
	}
	podBody := func(image, port, env string) string {
		return `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns","labels":{"app":"a"},"annotations":{"x":"y"}},` +
			`"spec":{"containers":[{"name":"c","image":"` + image + `","ports":[{"containerPort":` + port + `}],"env":[` + env + `]}],` +
			`"tolerations":[{"key":"k","operator":"Exists"}]}}`
	}
	cmBody := func(data string) string {
		return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"},"data":` + data + `}`
	}
	for _, tc := range []struct {
		kind  string
		live  runtime.Object
		steps []step
	}{
		{"Pod", &api.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", ResourceVersion: "1", CreationTimestamp: metav1.Unix(1e9, 0)}}, []step{
			{name: "first apply", apply: podBody("i", "80", `{"name":"A","value":"1"},{"name":"B","value":"2"}`), manager: "deployer"},
			{name: "repeated apply", apply: podBody("i", "80", `{"name":"A","value":"1"},{"name":"B","value":"2"}`), manager: "deployer"},
			{name: "apply drops an env var and a port", apply: podBody("i2", "81", `{"name":"A","value":"1"}`), manager: "deployer"},
			{name: "conflict", apply: podBody("other", "81", ``), manager: "intruder"},
			{name: "forced", apply: podBody("other", "81", ``), manager: "intruder", force: true},
			{name: "update by another manager", manager: "editor", update: func(o runtime.Object) runtime.Object {
				p := o.(*api.Pod)
				p.Labels["edited"] = "yes"
				p.Spec.ActiveDeadlineSeconds = new(int64)
				return p
			}},
			{name: "status apply", status: true, manager: "kubelet",
				apply: `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns"},"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}`},
			{name: "status update", status: true, manager: "kubelet-update", update: func(o runtime.Object) runtime.Object {
				p := o.(*api.Pod)
				p.Status.Message = "m"
				return p
			}},
			{name: "apply back", apply: podBody("i", "80", `{"name":"A","value":"1"}`), manager: "deployer", force: true},
		}},
		{"ConfigMap", &api.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u2", ResourceVersion: "1"}}, []step{
			{name: "first apply", apply: cmBody(`{"a":"1","b":"1"}`), manager: "alice"},
			{name: "second manager", apply: cmBody(`{"c":"1"}`), manager: "bob"},
			{name: "shared value", apply: cmBody(`{"a":"1"}`), manager: "bob"},
			{name: "conflict", apply: cmBody(`{"a":"2","b":"2"}`), manager: "bob"},
			{name: "kubectl apply", apply: cmBody(`{"d":"1"}`), manager: "kubectl"},
			{name: "update", manager: "editor", update: func(o runtime.Object) runtime.Object {
				c := o.(*api.ConfigMap)
				delete(c.Data, "b")
				c.Data["e"] = "1"
				return c
			}},
			{name: "apply drops a key", apply: cmBody(`{"a":"1"}`), manager: "alice"},
		}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			var strategy, statusStrategy any
			if tc.kind == "Pod" {
				strategy, statusStrategy = pod.Strategy, pod.StatusStrategy
			}
			ours := map[bool]*managedfields.FieldManager{false: fieldManager(t, tc.kind, "", strategy), true: fieldManager(t, tc.kind, "status", statusStrategy)}
			kube := map[bool]*managedfields.FieldManager{false: kubeFieldManager(t, tc.kind, "", strategy), true: kubeFieldManager(t, tc.kind, "status", statusStrategy)}
			live := tc.live
			for _, s := range tc.steps {
				var got, want runtime.Object
				var gotErr, wantErr error
				if s.apply != "" {
					p1, err := DecodeApplyPatch([]byte(s.apply))
					if err != nil {
						t.Fatal(err)
					}
					p2, _ := DecodeApplyPatch([]byte(s.apply))
					got, gotErr = ours[s.status].Apply(live.DeepCopyObject(), p1.Object, s.manager, s.force)
					want, wantErr = kube[s.status].Apply(live.DeepCopyObject(), p2.Object, s.manager, s.force)
				} else {
					got = ours[s.status].UpdateNoErrors(live.DeepCopyObject(), s.update(live.DeepCopyObject()), s.manager)
					want = kube[s.status].UpdateNoErrors(live.DeepCopyObject(), s.update(live.DeepCopyObject()), s.manager)
				}
				sameResult(t, s.name, got, want, gotErr, wantErr)
				if wantErr == nil {
					live = want
				}
			}
			if len(managers(t, live)) < 3 {
				t.Fatalf("the steps left %v", managers(t, live))
			}
		})
	}
}

// sameErrorKind: two errors of the same status (code and reason) whose
// messages agree up to the first colon. When an object has several fields
// the schema does not know, structured-merge-diff names the first it meets
// in map order, so kube's own message for one input varies between runs.
func sameErrorKind(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	if apierrors.ReasonForError(a) != apierrors.ReasonForError(b) {
		return false
	}
	var sa, sb apierrors.APIStatus
	if errors.As(a, &sa) != errors.As(b, &sb) || (sa != nil && sa.Status().Code != sb.Status().Code) {
		return false
	}
	before := func(e error) string { s, _, _ := strings.Cut(e.Error(), ":"); return s }
	return before(a) == before(b)
}

// TestFieldManagerLeavesSharedObjectsAlone: applies and updates from many
// goroutines against one live object (as a decoded object shared by a
// cache would be passed) and one decoded apply body never write to them.
// Run with -race, it also catches a write racing with the others' reads.
func TestFieldManagerLeavesSharedObjectsAlone(t *testing.T) {
	fm := fieldManager(t, "Pod", "", pod.Strategy)
	body := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns","labels":{"app":"a"}},` +
		`"spec":{"containers":[{"name":"c","image":"i","ports":[{"containerPort":80}],"env":[{"name":"A","value":"1"}]}]}}`
	p, err := DecodeApplyPatch([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	live, err := fm.Apply(&api.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", ResourceVersion: "1"}}, p.Object, "deployer", false)
	if err != nil {
		t.Fatal(err)
	}
	shared := live.(*api.Pod)
	shared.ResourceVersion = "2"
	sharedPatch, err := DecodeApplyPatch([]byte(strings.ReplaceAll(body, `"i"`, `"j"`)))
	if err != nil {
		t.Fatal(err)
	}
	wantLive, wantPatch := shared.DeepCopy(), sharedPatch.Object.DeepCopy()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				if _, err := fm.Apply(shared, sharedPatch.Object, fmt.Sprintf("m%d", g), true); err != nil {
					t.Error(err)
					return
				}
				upd := shared.DeepCopy()
				upd.Labels["n"] = fmt.Sprint(i)
				fm.UpdateNoErrors(shared, upd, "editor")
			}
		}()
	}
	wg.Wait()
	if !reflect.DeepEqual(shared, wantLive) {
		t.Fatalf("the shared live object changed:\n%#v\nwas\n%#v", shared, wantLive)
	}
	if !reflect.DeepEqual(sharedPatch.Object, wantPatch) {
		t.Fatalf("the shared apply body changed:\n%#v\nwas\n%#v", sharedPatch.Object, wantPatch)
	}
}
