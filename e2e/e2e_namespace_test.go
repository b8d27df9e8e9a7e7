package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// Namespace deletion (issue 7, point 5): a deleted namespace is Terminating
// until kube's namespace controller, run by the leader as
// system:serviceaccount:kube-system:namespace-controller, has deleted
// everything in it and removed the kubernetes finalizer through
// /finalize; then the namespace goes.

const namespaceWait = 90 * time.Second

// fillNamespace creates one object of every namespaced kind served in ns.
func fillNamespace(t *testing.T, cs kubernetes.Interface, ns string) {
	t.Helper()
	ctx := context.Background()
	om := metav1.ObjectMeta{Name: "content"}
	create := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("create %s in %s: %v", what, ns, err)
		}
	}
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: om}, metav1.CreateOptions{})
	create("serviceaccount", err)
	_, err = cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: om, StringData: map[string]string{"a": "b"}}, metav1.CreateOptions{})
	create("secret", err)
	_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: om, Data: map[string]string{"a": "b"}}, metav1.CreateOptions{})
	create("configmap", err)
	podSpec := corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}
	_, err = cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: om, Spec: podSpec}, metav1.CreateOptions{})
	create("pod", err)
	_, err = cs.CoreV1().PodTemplates(ns).Create(ctx, &corev1.PodTemplate{ObjectMeta: om, Template: corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "x"}}, Spec: podSpec}}, metav1.CreateOptions{})
	create("podtemplate", err)
	_, err = cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: om, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}}}, metav1.CreateOptions{})
	create("role", err)
	_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: om,
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "content"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "content", Namespace: ns}}}, metav1.CreateOptions{})
	create("rolebinding", err)
}

// namespaceContent counts the objects of every namespaced kind served in
// ns, the controllers' default ServiceAccount and kube-root-ca.crt included.
func namespaceContent(t *testing.T, cs kubernetes.Interface, ns string) map[string]int {
	t.Helper()
	ctx := context.Background()
	out := map[string]int{}
	count := func(what string, n int, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("list %s in %s: %v", what, ns, err)
		}
		out[what] = n
	}
	sas, err := cs.CoreV1().ServiceAccounts(ns).List(ctx, metav1.ListOptions{})
	count("serviceaccounts", len(sas.Items), err)
	secrets, err := cs.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	count("secrets", len(secrets.Items), err)
	cms, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	count("configmaps", len(cms.Items), err)
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	count("pods", len(pods.Items), err)
	pts, err := cs.CoreV1().PodTemplates(ns).List(ctx, metav1.ListOptions{})
	count("podtemplates", len(pts.Items), err)
	roles, err := cs.RbacV1().Roles(ns).List(ctx, metav1.ListOptions{})
	count("roles", len(roles.Items), err)
	rbs, err := cs.RbacV1().RoleBindings(ns).List(ctx, metav1.ListOptions{})
	count("rolebindings", len(rbs.Items), err)
	return out
}

func namespaceGone(cs kubernetes.Interface, ns string) func() bool {
	return func() bool {
		_, err := cs.CoreV1().Namespaces().Get(context.Background(), ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
}

// TestNamespaceCascade: deleting a namespace deletes everything in it,
// then the namespace; cluster-scoped objects stay.
func TestNamespaceCascade(t *testing.T) {
	n := startNode(t)
	cs := n.clientset()
	ctx := context.Background()
	const ns = "cascade"
	ctlNamespace(t, cs, ns)
	waitDefaultSA(t, n, cs, ns, "")
	waitRootCA(t, n, cs, ns, "")
	fillNamespace(t, cs, ns)
	for kind, c := range namespaceContent(t, cs, ns) {
		if c == 0 {
			t.Fatalf("no %s in %s before the deletion", kind, ns)
		}
	}
	// A cluster-scoped object is not part of any namespace.
	csr := &certificatesv1.CertificateSigningRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "cascade-outside"},
		Spec: certificatesv1.CertificateSigningRequestSpec{
			Request: csrPEM(t, "cascade-outside"), SignerName: certificatesv1.KubeAPIServerClientSignerName,
			Usages: []certificatesv1.KeyUsage{certificatesv1.UsageClientAuth},
		},
	}
	if _, err := cs.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err == nil && (got.Status.Phase != corev1.NamespaceTerminating || got.DeletionTimestamp == nil) {
		t.Fatalf("deleted namespace: phase %q, deletionTimestamp %v; want Terminating", got.Status.Phase, got.DeletionTimestamp)
	}
	waitFor(t, namespaceWait, "namespace "+ns+" to go", namespaceGone(cs, ns))
	for kind, c := range namespaceContent(t, cs, ns) {
		if c != 0 {
			t.Fatalf("%d %s left in the deleted namespace %s", c, kind, ns)
		}
	}
	if _, err := cs.CertificatesV1().CertificateSigningRequests().Get(ctx, "cascade-outside", metav1.GetOptions{}); err != nil {
		t.Fatalf("a cluster-scoped object went with the namespace: %v", err)
	}
	// The name is free again.
	ctlNamespace(t, cs, ns)
}

// TestNamespaceWaitsForFinalizers: content held by a finalizer keeps the
// namespace Terminating, with kube's status conditions saying why; once
// the finalizer goes, so do the content and the namespace.
func TestNamespaceWaitsForFinalizers(t *testing.T) {
	t.Parallel() // mostly waits (e2e/doc.go)
	n := startNode(t)
	cs := n.clientset()
	ctx := context.Background()
	const ns = "held"
	ctlNamespace(t, cs, ns)
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "pin", Finalizers: []string{holdFinalizer}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var cond *corev1.NamespaceCondition
	waitFor(t, namespaceWait, "the namespace controller to report the finalizer that holds "+ns, func() bool {
		got, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the namespace went while a finalizer holds its content: %v", err)
		}
		for i, c := range got.Status.Conditions {
			if c.Type == corev1.NamespaceFinalizersRemaining && c.Status == corev1.ConditionTrue {
				cond = &got.Status.Conditions[i]
			}
		}
		return cond != nil
	})
	if want := "Some content in the namespace has finalizers remaining: " + holdFinalizer + " in 1 resource instances"; cond.Message != want {
		t.Fatalf("condition message %q, want %q", cond.Message, want)
	}
	pin, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "pin", metav1.GetOptions{})
	if err != nil || pin.DeletionTimestamp == nil {
		t.Fatalf("held content: %v %+v, want it marked for deletion", err, pin.ObjectMeta)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Patch(ctx, "pin", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, namespaceWait, "namespace "+ns+" to go", namespaceGone(cs, ns))
}

// TestNamespaceFinalize: /finalize is served for update only, as
// kube-apiserver routes it, and removing the last finalizer of a
// terminating namespace through it deletes the namespace. No controllers
// run: the test plays the namespace controller.
func TestNamespaceFinalize(t *testing.T) {
	n := startNode(t, "--controllers=false")
	cs := n.clientset()
	c := n.httpClient()
	ctx := context.Background()
	const ns = "finalize-me"
	ctlNamespace(t, cs, ns)
	path := n.url() + "/api/v1/namespaces/" + ns + "/finalize"

	// kube's NamespaceLifecycle admission keeps the system namespaces.
	for _, system := range []string{"default", "kube-system", "kube-public"} {
		err := cs.CoreV1().Namespaces().Delete(ctx, system, metav1.DeleteOptions{})
		wantAPIError(t, err, http.StatusForbidden, metav1.StatusReasonForbidden, `namespaces "`+system+`" is forbidden: this namespace may not be deleted`)
	}

	r := do(t, c, http.MethodGet, path, nil, nil)
	if r.code != http.StatusMethodNotAllowed {
		t.Fatalf("GET finalize: %d %s, want 405", r.code, r.body)
	}
	r = do(t, c, http.MethodPatch, path, jsonHeader("application/merge-patch+json"), []byte(`{}`))
	if r.code != http.StatusMethodNotAllowed {
		t.Fatalf("PATCH finalize: %d %s, want 405", r.code, r.body)
	}
	resources, err := cs.Discovery().ServerResourcesForGroupVersion("v1")
	if err != nil {
		t.Fatal(err)
	}
	verbs := map[string][]string{}
	for _, res := range resources.APIResources {
		verbs[res.Name] = res.Verbs
	}
	if v := verbs["namespaces/finalize"]; len(v) != 1 || v[0] != "update" {
		t.Fatalf("discovery verbs of namespaces/finalize %v, want [update]", v)
	}
	if v := verbs["namespaces/status"]; len(v) != 3 {
		t.Fatalf("discovery verbs of namespaces/status %v, want get, patch, update", v)
	}

	// finalize writes the object but keeps its status (kube's
	// FinalizeStrategy).
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil || got.Status.Phase != corev1.NamespaceTerminating {
		t.Fatalf("deleted namespace without a controller: %v %+v, want it Terminating", err, got)
	}
	changed := got.DeepCopy()
	changed.Status.Phase = corev1.NamespaceActive
	changed.Spec.Finalizers = append(changed.Spec.Finalizers, "example.com/second")
	out, err := cs.CoreV1().Namespaces().Finalize(ctx, changed, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("finalize: %v", err)
	}
	if len(out.Spec.Finalizers) != 2 || out.Status.Phase != corev1.NamespaceTerminating {
		t.Fatalf("after finalize: finalizers %v, phase %q; want two finalizers, still Terminating", out.Spec.Finalizers, out.Status.Phase)
	}

	// The namespace controller's last step: no finalizer left, and the
	// namespace goes in the same write.
	out.Spec.Finalizers = nil
	body, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	r = do(t, c, http.MethodPut, path, jsonHeader("application/json"), body)
	if r.code != http.StatusOK {
		t.Fatalf("PUT finalize: %d %s", r.code, r.body)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("namespace after its last finalizer went: %v, want NotFound", err)
	}
}

// TestDeletionThroughAFollower: on a three-node cluster the garbage
// collector and the namespace controller run on one node, the holder of
// their lease, while a client talks to another follower, whose writes
// run there and reach the log.
func TestDeletionThroughAFollower(t *testing.T) {
	nodes := startCluster(t, 3)
	leader := leaderOf(t, nodes)
	host := hostOf(t, nodes)
	var follower *node
	for _, n := range followersOf(nodes, leader) {
		if n != host {
			follower = n
		}
	}
	if follower == nil {
		t.Fatalf("the controllers run on the leader %s", leader.name)
	}
	cs := follower.clientset()
	ctx := context.Background()
	const ns = "follower-cascade"
	ctlNamespace(t, cs, ns)

	owner, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dependents(t, cs, ns, "dep", "ConfigMap", owner, true)
	fg := metav1.DeletePropagationForeground
	if err := cs.CoreV1().ConfigMaps(ns).Delete(ctx, "owner", metav1.DeleteOptions{PropagationPolicy: &fg}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, gcWait, "the owner to go after its dependents", func() bool {
		_, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, "owner", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if d := dependentsMeta(t, cs, ns, "dep"); !allGone(d) {
		t.Fatalf("dependents left after a foreground deletion: %v", d)
	}

	fillNamespace(t, cs, ns)
	if err := cs.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, namespaceWait, "namespace "+ns+" to go", namespaceGone(cs, ns))
	for kind, c := range namespaceContent(t, cs, ns) {
		if c != 0 {
			t.Fatalf("%d %s left in the deleted namespace %s", c, kind, ns)
		}
	}
}
