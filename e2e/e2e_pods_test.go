package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func minimalPod(name string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
	}
}

// TestPods checks kube's pod defaulting, validation and deletion rules.
func TestPods(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	pods := n.clientset().CoreV1().Pods("default")

	t.Run("defaults", func(t *testing.T) {
		p, err := pods.Create(ctx, minimalPod("defaults"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s := p.Spec
		c := s.Containers[0]
		checks := []struct {
			field     string
			got, want interface{}
		}{
			{"spec.restartPolicy", s.RestartPolicy, corev1.RestartPolicyAlways},
			{"spec.dnsPolicy", s.DNSPolicy, corev1.DNSClusterFirst},
			{"spec.terminationGracePeriodSeconds", deref(s.TerminationGracePeriodSeconds), int64(30)},
			{"spec.schedulerName", s.SchedulerName, corev1.DefaultSchedulerName},
			{"spec.enableServiceLinks", deref(s.EnableServiceLinks), true},
			{"spec.securityContext set", s.SecurityContext != nil, true},
			{"containers[0].terminationMessagePath", c.TerminationMessagePath, corev1.TerminationMessagePathDefault},
			{"containers[0].terminationMessagePolicy", c.TerminationMessagePolicy, corev1.TerminationMessageReadFile},
			{"containers[0].imagePullPolicy (image without tag)", c.ImagePullPolicy, corev1.PullAlways},
			{"status.phase", p.Status.Phase, corev1.PodPending},
			{"status.qosClass", p.Status.QOSClass, corev1.PodQOSBestEffort},
			{"metadata.generation", p.Generation, int64(1)},
		}
		for _, ck := range checks {
			if ck.got != ck.want {
				t.Errorf("%s = %v, want %v", ck.field, ck.got, ck.want)
			}
		}
		tagged := minimalPod("tagged")
		tagged.Spec.Containers[0].Image = "nginx:1.27"
		p, err = pods.Create(ctx, tagged, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.Containers[0].ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("imagePullPolicy of a tagged image = %s, want IfNotPresent", p.Spec.Containers[0].ImagePullPolicy)
		}
	})

	t.Run("invalid", func(t *testing.T) {
		cases := []struct {
			name   string
			mutate func(p *corev1.Pod)
			fields []string // every one must be among the causes
		}{
			{"no containers", func(p *corev1.Pod) { p.Spec.Containers = nil }, []string{"spec.containers"}},
			{"container without image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "" }, []string{"spec.containers[0].image"}},
			{"bad container name", func(p *corev1.Pod) { p.Spec.Containers[0].Name = "Bad_Name" }, []string{"spec.containers[0].name"}},
			{"duplicate container names", func(p *corev1.Pod) {
				p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "c", Image: "x"})
			}, []string{"spec.containers[1].name"}},
			{"bad restart policy", func(p *corev1.Pod) { p.Spec.RestartPolicy = "Sometimes" }, []string{"spec.restartPolicy"}},
			{"bad name and bad port", func(p *corev1.Pod) {
				p.Name = "Bad_Name"
				p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 70000}}
			}, []string{"metadata.name", "spec.containers[0].ports[0].containerPort"}},
		}
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				p := minimalPod("invalid")
				c.mutate(p)
				_, err := pods.Create(ctx, p, metav1.CreateOptions{})
				st := wantAPIError(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, `Pod "`+p.Name+`" is invalid: *`)
				if st.Details == nil || st.Details.Kind != "Pod" || st.Details.Name != p.Name {
					t.Fatalf("details %+v", st.Details)
				}
				have := map[string]bool{}
				for _, cause := range st.Details.Causes {
					have[cause.Field] = true
				}
				for _, f := range c.fields {
					if !have[f] {
						t.Errorf("no cause for %s in %+v", f, st.Details.Causes)
					}
				}
			})
		}
		if _, err := pods.Get(ctx, "invalid", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("an invalid pod was stored: %v", err)
		}
	})

	t.Run("update rules", func(t *testing.T) {
		p, err := pods.Create(ctx, minimalPod("immutable"), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.Spec.RestartPolicy = corev1.RestartPolicyNever
		_, err = pods.Update(ctx, p, metav1.UpdateOptions{})
		st := wantAPIError(t, err, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid, `Pod "immutable" is invalid: spec: Forbidden: pod updates may not change fields other than *`)
		if len(st.Details.Causes) == 0 || st.Details.Causes[0].Field != "spec" {
			t.Fatalf("causes %+v", st.Details.Causes)
		}
	})

	t.Run("delete unscheduled is immediate", func(t *testing.T) {
		if _, err := pods.Create(ctx, minimalPod("gone"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		r := do(t, n.httpClient(), http.MethodDelete, n.url()+"/api/v1/namespaces/default/pods/gone", map[string]string{"Accept": "application/json"}, nil)
		if r.code != http.StatusOK {
			t.Fatalf("delete: %d %s", r.code, r.body)
		}
		var deleted corev1.Pod
		if err := json.Unmarshal(r.body, &deleted); err != nil || deleted.Kind != "Pod" || deleted.Name != "gone" {
			t.Fatalf("delete answers with the pod: %v %s", err, r.body)
		}
		if deleted.DeletionTimestamp == nil || deref(deleted.DeletionGracePeriodSeconds) != 0 {
			t.Fatalf("deleted pod: deletionTimestamp %v grace %v", deleted.DeletionTimestamp, deleted.DeletionGracePeriodSeconds)
		}
		_, err := pods.Get(ctx, "gone", metav1.GetOptions{})
		wantAPIError(t, err, http.StatusNotFound, metav1.StatusReasonNotFound, `pods "gone" not found`)
	})

	t.Run("delete scheduled is graceful", func(t *testing.T) {
		p := minimalPod("scheduled")
		p.Spec.NodeName = "node-1"
		if _, err := pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := pods.Delete(ctx, "scheduled", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := pods.Get(ctx, "scheduled", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("a scheduled pod is deleted gracefully, it stays: %v", err)
		}
		if got.DeletionTimestamp == nil || deref(got.DeletionGracePeriodSeconds) != 30 {
			t.Fatalf("deletionTimestamp %v, grace %v; want set and 30", got.DeletionTimestamp, got.DeletionGracePeriodSeconds)
		}
		zero := int64(0)
		if err := pods.Delete(ctx, "scheduled", metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		if _, err := pods.Get(ctx, "scheduled", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("after delete with grace 0: %v", err)
		}
	})

	t.Run("finalizers hold a delete until removed", func(t *testing.T) {
		cms := n.clientset().CoreV1().ConfigMaps("default")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "held", Finalizers: []string{"example.com/hold"}}}
		if _, err := cms.Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := cms.Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := cms.Get(ctx, "held", metav1.GetOptions{})
		if err != nil || got.DeletionTimestamp == nil {
			t.Fatalf("held configmap: %v %v", err, got)
		}
		if _, err := cms.Patch(ctx, "held", "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cms.Get(ctx, "held", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("removing the last finalizer deletes the object: %v", err)
		}
	})
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// TestServices checks the read-only services resource: default/kubernetes
// points at the API, and writes are refused.
func TestServices(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	svcs := n.clientset().CoreV1().Services("default")
	svc, err := svcs.Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.ClusterIP != "10.96.0.1" || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 443 ||
		svc.Spec.Ports[0].Name != "https" || svc.Spec.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Fatalf("default/kubernetes spec: %+v", svc.Spec)
	}
	if svc.Spec.Type != corev1.ServiceTypeClusterIP || svc.Labels["component"] != "apiserver" || svc.Labels["provider"] != "kubernetes" {
		t.Fatalf("default/kubernetes: type %s labels %v", svc.Spec.Type, svc.Labels)
	}
	list, err := n.clientset().CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("services -A: %v, %d items", err, len(list.Items))
	}

	// Services are read-only on trustplane: default/kubernetes alone
	// (docs/COMPATIBILITY.md). kube-apiserver allocates and stores them.
	n.trustplaneOnly(t, "Services are read-only")
	newSvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}}}}
	_, err = svcs.Create(ctx, newSvc, metav1.CreateOptions{})
	wantAPIError(t, err, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, `create is not supported on resources of kind "services"`)
	err = svcs.Delete(ctx, "kubernetes", metav1.DeleteOptions{})
	wantAPIError(t, err, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, `delete is not supported on resources of kind "services"`)
	_, err = svcs.Patch(ctx, "kubernetes", "application/merge-patch+json", []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	wantAPIError(t, err, http.StatusMethodNotAllowed, metav1.StatusReasonMethodNotAllowed, "")
	after, err := svcs.Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil || after.ResourceVersion != svc.ResourceVersion {
		t.Fatalf("refused writes changed default/kubernetes: %v", err)
	}

	r := do(t, n.httpClient(), http.MethodGet, n.url()+"/api/v1", nil, nil)
	var rl metav1.APIResourceList
	if err := json.Unmarshal(r.body, &rl); err != nil {
		t.Fatal(err)
	}
	for _, res := range rl.APIResources {
		if res.Name == "services" && strings.Join(res.Verbs, ",") != "get,list,watch" {
			t.Fatalf("services verbs in discovery: %v", res.Verbs)
		}
	}
}
