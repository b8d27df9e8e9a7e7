package apply

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	openapinamer "k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	api "k8s.io/kubernetes/pkg/apis/core"
	_ "k8s.io/kubernetes/pkg/apis/core/install"
	generatedopenapi "k8s.io/kubernetes/pkg/generated/openapi"
	"k8s.io/kubernetes/pkg/registry/core/pod"
)

var (
	testTCOnce sync.Once
	testTC     managedfields.TypeConverter
	testTCErr  error
)

// typeConverter builds the converter for ConfigMaps and Pods once.
func typeConverter(t testing.TB) managedfields.TypeConverter {
	t.Helper()
	testTCOnce.Do(func() {
		testTC, testTCErr = NewTypeConverter(TypeConverterConfig{
			Definitions:    generatedopenapi.GetOpenAPIDefinitions,
			DefinitionName: openapinamer.NewDefinitionNamer(legacyscheme.Scheme).GetDefinitionName,
			TypeNames:      []string{"k8s.io/api/core/v1.ConfigMap", "k8s.io/api/core/v1.Pod"},
		})
	})
	if testTCErr != nil {
		t.Fatal(testTCErr)
	}
	return testTC
}

func fieldManager(t testing.TB, kind, sub string, strategy any) *managedfields.FieldManager {
	t.Helper()
	fm, err := NewFieldManager(FieldManagerConfig{
		TypeConverter: typeConverter(t), Scheme: legacyscheme.Scheme,
		Kind: schema.GroupVersionKind{Version: "v1", Kind: kind}, Subresource: sub, Strategy: strategy,
	})
	if err != nil {
		t.Fatal(err)
	}
	return fm
}

func mustApply(t *testing.T, fm *managedfields.FieldManager, live runtime.Object, body, manager string, force bool) (runtime.Object, error) {
	t.Helper()
	patch, err := DecodeApplyPatch([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return fm.Apply(live, patch.Object, manager, force)
}

func managers(t *testing.T, obj runtime.Object) map[string]string {
	t.Helper()
	m, err := meta.Accessor(obj)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range m.GetManagedFields() {
		out[e.Manager+"/"+string(e.Operation)] = string(e.FieldsV1.Raw)
	}
	return out
}

// TestFieldManagerApply runs the ownership rules on internal ConfigMaps:
// the FieldManager built here merges, records owners, reports conflicts as
// 409s with one cause per field, and yields to force.
func TestFieldManagerApply(t *testing.T) {
	fm := fieldManager(t, "ConfigMap", "", nil)
	live := &api.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", UID: "u1", ResourceVersion: "1"}}
	cm := func(data string) string {
		return `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"ns"},"data":` + data + `}`
	}
	obj, err := mustApply(t, fm, live, cm(`{"a":"1","b":"1"}`), "alice", false)
	if err != nil {
		t.Fatal(err)
	}
	if got := managers(t, obj)["alice/Apply"]; got != `{"f:data":{"f:a":{},"f:b":{}}}` {
		t.Fatalf("alice owns %s", got)
	}

	cases := []struct {
		name     string
		body     string
		force    bool
		wantCode int
		causes   []string
	}{
		{name: "one conflicting field", body: cm(`{"a":"2"}`), wantCode: http.StatusConflict, causes: []string{".data.a"}},
		{name: "two conflicting fields", body: cm(`{"a":"2","b":"2"}`), wantCode: http.StatusConflict, causes: []string{".data.a", ".data.b"}},
		{name: "same value is shared, not a conflict", body: cm(`{"a":"1"}`), wantCode: http.StatusOK},
		{name: "force takes the field", body: cm(`{"a":"2"}`), force: true, wantCode: http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := mustApply(t, fm, obj.DeepCopyObject(), tc.body, "bob", tc.force)
			if tc.wantCode == http.StatusOK {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var se *apierrors.StatusError
			if !errors.As(err, &se) || se.ErrStatus.Code != int32(tc.wantCode) || se.ErrStatus.Details == nil {
				t.Fatalf("error %v", err)
			}
			var fields []string
			for _, c := range se.ErrStatus.Details.Causes {
				if c.Type != metav1.CauseTypeFieldManagerConflict || c.Message != `conflict with "alice"` {
					t.Fatalf("cause %+v", c)
				}
				fields = append(fields, c.Field)
			}
			if strings.Join(fields, ",") != strings.Join(tc.causes, ",") {
				t.Fatalf("causes %v, want %v", fields, tc.causes)
			}
		})
	}
}

// TestFieldManagerResetFields checks that a strategy's reset fields are not
// owned: an apply to a pod does not own its status, an apply to its status
// subresource owns no spec field.
func TestFieldManagerResetFields(t *testing.T) {
	live := &api.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", ResourceVersion: "1"}}
	body := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"ns"},` +
		`"spec":{"containers":[{"name":"c","image":"i"}]},"status":{"message":"m"}}`
	main, err := mustApply(t, fieldManager(t, "Pod", "", pod.Strategy), live, body, "deployer", false)
	if err != nil {
		t.Fatal(err)
	}
	if f := managers(t, main)["deployer/Apply"]; strings.Contains(f, "f:status") || !strings.Contains(f, "f:spec") {
		t.Fatalf("main apply owns %s", f)
	}
	status, err := mustApply(t, fieldManager(t, "Pod", "status", pod.StatusStrategy), live, body, "kubelet", false)
	if err != nil {
		t.Fatal(err)
	}
	if f := managers(t, status)["kubelet/Apply"]; !strings.Contains(f, "f:status") || strings.Contains(f, "f:spec") {
		t.Fatalf("status apply owns %s", f)
	}
}

func TestDecodeApplyPatch(t *testing.T) {
	cases := []struct {
		name    string
		body    string
		wantErr error
		strict  error
	}{
		{name: "JSON", body: `{"apiVersion":"v1","kind":"ConfigMap"}`},
		{name: "YAML", body: "apiVersion: v1\nkind: ConfigMap\n"},
		{name: "not an object", body: "[1, 2", wantErr: ErrBadApplyPatch},
		{name: "duplicate field is only a strict error", body: "kind: A\nkind: B\n", strict: ErrStrictApplyPatch},
		{name: "duplicate JSON field is only a strict error", body: `{"kind":"A","kind":"B"}`, strict: ErrStrictApplyPatch},
		{name: "JSON that YAML refuses", body: `{"kind":"\/"}`, wantErr: ErrBadApplyPatch},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := DecodeApplyPatch([]byte(tc.body))
			if !errors.Is(err, tc.wantErr) && !(err == nil && tc.wantErr == nil) {
				t.Fatalf("decode: %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr != nil {
				return
			}
			if err := p.CheckStrict(); !errors.Is(err, tc.strict) && !(err == nil && tc.strict == nil) {
				t.Fatalf("strict: %v, want %v", err, tc.strict)
			}
		})
	}
}

func TestManagerOrUserAgent(t *testing.T) {
	cases := []struct{ name, manager, userAgent, want string }{
		{"explicit manager wins", "mgr", "kubectl/v1.32.0 (linux/amd64)", "mgr"},
		{"user agent up to the first slash", "", "kubectl/v1.32.0 (linux/amd64)", "kubectl"},
		{"no slash", "", "curl", "curl"},
		{"unprintable characters dropped", "", "a\x00b\tc/1", "abc"},
		{"cut to 128 bytes", "", strings.Repeat("x", 200), strings.Repeat("x", 128)},
		{"empty", "", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ManagerOrUserAgent(tc.manager, tc.userAgent); got != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}
