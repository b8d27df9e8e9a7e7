package e2e_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

const saMountPath = "/var/run/secrets/kubernetes.io/serviceaccount"

// tokenVolume returns the pod's projected ServiceAccount token volume, or nil.
func tokenVolume(p *corev1.Pod) *corev1.Volume {
	for i, v := range p.Spec.Volumes {
		if strings.HasPrefix(v.Name, "kube-api-access-") {
			return &p.Spec.Volumes[i]
		}
	}
	return nil
}

func createNamespace(t *testing.T, cs kubernetes.Interface, name string) {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// TestServiceAccountAdmission checks kube's ServiceAccount admission for
// pods: the default account, the account must exist, mountable secrets, the
// projected token volume and the automount preference (the pod's wins).
func TestServiceAccountAdmission(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	cs := n.clientset()
	const ns = "sa-admission"
	createNamespace(t, cs, ns)
	sas := cs.CoreV1().ServiceAccounts(ns)
	pods := cs.CoreV1().Pods(ns)
	no, yes := false, true
	for _, sa := range []*corev1.ServiceAccount{
		{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "builder"}, ImagePullSecrets: []corev1.LocalObjectReference{{Name: "registry"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "quiet"}, AutomountServiceAccountToken: &no},
		{
			ObjectMeta: metav1.ObjectMeta{Name: "strict", Annotations: map[string]string{"kubernetes.io/enforce-mountable-secrets": "true"}},
			Secrets:    []corev1.ObjectReference{{Name: "allowed"}},
		},
	} {
		if _, err := sas.Create(ctx, sa, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "already exists") {
			t.Fatal(err)
		}
	}

	t.Run("default account and token volume", func(t *testing.T) {
		pod := minimalPod("plain")
		pod.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "busybox"}}
		p, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.ServiceAccountName != "default" {
			t.Errorf("serviceAccountName = %q, want default", p.Spec.ServiceAccountName)
		}
		v := tokenVolume(p)
		if v == nil || v.Projected == nil {
			t.Fatalf("no projected kube-api-access volume: %+v", p.Spec.Volumes)
		}
		src := v.Projected.Sources
		if len(src) != 3 || src[0].ServiceAccountToken == nil || src[1].ConfigMap == nil || src[2].DownwardAPI == nil {
			t.Fatalf("projected sources = %+v, want token, configmap, downwardAPI", src)
		}
		if tok := src[0].ServiceAccountToken; tok.Path != "token" || tok.ExpirationSeconds == nil || *tok.ExpirationSeconds != 3607 {
			t.Errorf("token projection = %+v, want path token, 3607 s", tok)
		}
		if cm := src[1].ConfigMap; cm.Name != "kube-root-ca.crt" || len(cm.Items) != 1 || cm.Items[0].Key != "ca.crt" {
			t.Errorf("configmap projection = %+v", cm)
		}
		for _, c := range append(append([]corev1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
			found := false
			for _, m := range c.VolumeMounts {
				if m.Name == v.Name && m.MountPath == saMountPath && m.ReadOnly {
					found = true
				}
			}
			if !found {
				t.Errorf("container %s has no read-only mount of %s at %s: %+v", c.Name, v.Name, saMountPath, c.VolumeMounts)
			}
		}
	})

	t.Run("image pull secrets come from the account", func(t *testing.T) {
		pod := minimalPod("puller")
		pod.Spec.ServiceAccountName = "builder"
		p, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Spec.ImagePullSecrets) != 1 || p.Spec.ImagePullSecrets[0].Name != "registry" {
			t.Errorf("imagePullSecrets = %+v, want [registry]", p.Spec.ImagePullSecrets)
		}
	})

	t.Run("missing account", func(t *testing.T) {
		pod := minimalPod("orphan")
		pod.Spec.ServiceAccountName = "missing"
		_, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		wantAPIError(t, err, 403, metav1.StatusReasonForbidden,
			`pods "orphan" is forbidden: error looking up service account sa-admission/missing: serviceaccount "missing" not found`)
		if _, err := pods.Get(ctx, "orphan", metav1.GetOptions{}); err == nil {
			t.Fatal("a refused pod was stored")
		}
	})

	t.Run("automount preference", func(t *testing.T) {
		cases := []struct {
			name, account string
			pod           *bool
			want          bool
		}{
			{"am-default", "default", nil, true},
			{"am-pod-off", "default", &no, false},
			{"am-account-off", "quiet", nil, false},
			{"am-pod-wins", "quiet", &yes, true},
		}
		for _, c := range cases {
			pod := minimalPod(c.name)
			pod.Spec.ServiceAccountName = c.account
			pod.Spec.AutomountServiceAccountToken = c.pod
			p, err := pods.Create(ctx, pod, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if got := tokenVolume(p) != nil; got != c.want {
				t.Errorf("%s: token volume mounted = %v, want %v", c.name, got, c.want)
			}
		}
	})

	t.Run("enforce mountable secrets", func(t *testing.T) {
		pod := minimalPod("mounts-other")
		pod.Spec.ServiceAccountName = "strict"
		pod.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "other"}}}}
		_, err := pods.Create(ctx, pod, metav1.CreateOptions{})
		wantAPIError(t, err, 403, metav1.StatusReasonForbidden,
			`pods "mounts-other" is forbidden: volume with secret.secretName="other" is not allowed because service account strict does not reference that secret`)

		pod = minimalPod("env-other")
		pod.Spec.ServiceAccountName = "strict"
		pod.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "other"}, Key: "k"}}}}
		_, err = pods.Create(ctx, pod, metav1.CreateOptions{})
		wantAPIError(t, err, 403, metav1.StatusReasonForbidden,
			`pods "env-other" is forbidden: container c with envVar X referencing secret.secretName="other" is not allowed because service account strict does not reference that secret`)

		pod = minimalPod("mounts-allowed")
		pod.Spec.ServiceAccountName = "strict"
		pod.Spec.Volumes = []corev1.Volume{{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "allowed"}}}}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("dry run admits without storing", func(t *testing.T) {
		pod := minimalPod("dry")
		p, err := pods.Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			t.Fatal(err)
		}
		if p.Spec.ServiceAccountName != "default" || tokenVolume(p) == nil {
			t.Errorf("dry-run pod was not admitted: sa %q, volumes %+v", p.Spec.ServiceAccountName, p.Spec.Volumes)
		}
		if _, err := pods.Get(ctx, "dry", metav1.GetOptions{}); err == nil {
			t.Fatal("a dry-run pod was stored")
		}
	})
}

// TestServiceAccountPatchRules checks the ServiceAccount's patch semantics:
// secrets merge by name, imagePullSecrets are replaced whole.
func TestServiceAccountPatchRules(t *testing.T) {
	n := startNode(t)
	ctx := context.Background()
	sas := n.clientset().CoreV1().ServiceAccounts("default")
	_, err := sas.Create(ctx, &corev1.ServiceAccount{
		ObjectMeta:       metav1.ObjectMeta{Name: "patched"},
		Secrets:          []corev1.ObjectReference{{Name: "a"}},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "x"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	patch, _ := json.Marshal(map[string]any{
		"secrets":          []map[string]string{{"name": "b"}},
		"imagePullSecrets": []map[string]string{{"name": "y"}},
	})
	sa, err := sas.Patch(ctx, "patched", types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var secrets, pulls []string
	for _, s := range sa.Secrets {
		secrets = append(secrets, s.Name)
	}
	for _, s := range sa.ImagePullSecrets {
		pulls = append(pulls, s.Name)
	}
	if strings.Join(secrets, ",") != "b,a" && strings.Join(secrets, ",") != "a,b" {
		t.Errorf("secrets after strategic merge = %v, want a and b merged by name", secrets)
	}
	if strings.Join(pulls, ",") != "y" {
		t.Errorf("imagePullSecrets after strategic merge = %v, want [y] (atomic)", pulls)
	}

	// $patch directives: delete one list element by its merge key; replace
	// a whole map.
	if _, err := sas.Patch(ctx, "patched", types.MergePatchType, []byte(`{"metadata":{"labels":{"a":"1","b":"2"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	sa, err = sas.Patch(ctx, "patched", types.StrategicMergePatchType,
		[]byte(`{"secrets":[{"name":"a","$patch":"delete"}],"metadata":{"labels":{"$patch":"replace","c":"3"}}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secrets = nil
	for _, s := range sa.Secrets {
		secrets = append(secrets, s.Name)
	}
	if strings.Join(secrets, ",") != "b" {
		t.Errorf("secrets after $patch: delete of a = %v, want [b]", secrets)
	}
	if len(sa.Labels) != 1 || sa.Labels["c"] != "3" {
		t.Errorf("labels after $patch: replace = %v, want only c=3", sa.Labels)
	}
	// An unknown directive is refused and changes nothing.
	_, err = sas.Patch(ctx, "patched", types.StrategicMergePatchType, []byte(`{"secrets":[{"name":"b","$patch":"explode"}]}`), metav1.PatchOptions{})
	if err == nil {
		t.Fatal("an unknown $patch directive was accepted")
	}
	if after, _ := sas.Get(ctx, "patched", metav1.GetOptions{}); after.ResourceVersion != sa.ResourceVersion {
		t.Errorf("a refused patch changed the object")
	}
}
