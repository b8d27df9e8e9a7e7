package chart

import (
	"encoding/base64"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/trustplane/trustplane/deploy/image"
)

// TestLint: helm lint passes, plain and --strict, with every values file.
func TestLint(t *testing.T) {
	files := []string{"", "five.yaml", "existing-secret.yaml", "netpol-servicemonitor.yaml", "required-anti-affinity.yaml", "configured.yaml", "no-netpol.yaml", "read-replicas.yaml"}
	for _, f := range files {
		for _, strict := range []bool{false, true} {
			name := fmt.Sprintf("%s strict=%v", f, strict)
			if f == "" {
				name = fmt.Sprintf("default strict=%v", strict)
			}
			t.Run(name, func(t *testing.T) {
				args := []string{"lint", chartDir, "--namespace", namespace, "--kube-version", kubeVersion}
				if strict {
					args = append(args, "--strict")
				}
				if f != "" {
					args = append(args, "--values", valuesFile(f))
				}
				out, stderr, err := helm(t, args...)
				if err != nil {
					t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
				}
			})
		}
	}
}

// want is what a values file should render.
type want struct {
	replicas       int
	readReplicas   int
	caSecret       string
	hook           bool   // the certs-init hook (no existingSecret)
	antiAffinity   string // "preferred" or "required"
	networkPolicy  bool
	serviceMonitor bool
	encryption     bool
	authentication bool              // --authentication-config from a ConfigMap
	extraEnv       map[string]string // further variables and their values
}

func defaults() want {
	return want{replicas: 3, caSecret: "trustplane-ca", hook: true, antiAffinity: "preferred", networkPolicy: true}
}

// TestTemplate renders the chart with each values file, validates every
// object with kube's validation and checks the chart's own rules.
func TestTemplate(t *testing.T) {
	cases := []struct {
		name  string
		files []string
		want  func(*want)
	}{
		{"default", nil, func(*want) {}},
		{"five replicas", []string{"five.yaml"}, func(w *want) { w.replicas = 5 }},
		{"existing secret", []string{"existing-secret.yaml"}, func(w *want) { w.caSecret, w.hook = "my-trustplane-ca", false }},
		{"network policy and service monitor", []string{"netpol-servicemonitor.yaml"}, func(w *want) { w.networkPolicy, w.serviceMonitor = true, true }},
		{"network policy off", []string{"no-netpol.yaml"}, func(w *want) { w.networkPolicy = false }},
		{"required anti-affinity", []string{"required-anti-affinity.yaml"}, func(w *want) { w.antiAffinity = "required" }},
		{"every setting", []string{"configured.yaml"}, func(w *want) {
			w.encryption = true
			w.extraEnv = map[string]string{
				"TRUSTPLANE_LOG_LEVEL":                            "debug",
				"TRUSTPLANE_RUNTIME_CONFIG":                       "certificates.k8s.io/v1beta1=true",
				"TRUSTPLANE_FEATURE_GATES":                        "ClusterTrustBundle=true",
				"TRUSTPLANE_CLUSTER_SIGNING_DURATION":             "720h",
				"TRUSTPLANE_MAX_STALE_READ":                       "3s",
				"TRUSTPLANE_ADMISSION_WEBHOOK_MAX_RESPONSE_BYTES": "4Mi",
				"TRUSTPLANE_DEAD_SERVER_TIMEOUT":                  "10m",
				"TRUSTPLANE_SERVICE_ACCOUNT_ISSUER":               "https://trustplane.example.com",
				"TRUSTPLANE_WATCH_CACHE_WINDOW":                   "10m",
				"TRUSTPLANE_SERVICE_ACCOUNT_JWKS_URI":             "https://trustplane.example.com/openid/v1/jwks",
			}
			w.authentication = true
		}},
		{"read replicas", []string{"read-replicas.yaml"}, func(w *want) {
			w.readReplicas = 2
			w.extraEnv = map[string]string{"TRUSTPLANE_EXECUTE_WRITES": "local"}
		}},
		{"five voters, read replicas, required anti-affinity, policies", []string{"five.yaml", "read-replicas.yaml", "required-anti-affinity.yaml", "netpol-servicemonitor.yaml"}, func(w *want) {
			w.replicas, w.readReplicas, w.antiAffinity, w.networkPolicy, w.serviceMonitor = 5, 2, "required", true, true
			w.extraEnv = map[string]string{"TRUSTPLANE_EXECUTE_WRITES": "local"}
		}},
		{"five replicas, existing secret, required anti-affinity, policies", []string{"five.yaml", "existing-secret.yaml", "required-anti-affinity.yaml", "netpol-servicemonitor.yaml"}, func(w *want) {
			w.replicas, w.caSecret, w.hook, w.antiAffinity, w.networkPolicy, w.serviceMonitor = 5, "my-trustplane-ca", false, "required", true, true
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var files []string
			for _, f := range c.files {
				files = append(files, valuesFile(f))
			}
			ms := render(t, files)
			objs := map[string]any{}
			for _, m := range ms {
				if _, dup := objs[m.String()]; dup {
					t.Fatalf("%s rendered twice", m)
				}
				objs[m.String()] = kubeValidate(t, m)
			}
			w := defaults()
			c.want(&w)
			checkChart(t, ms, objs, w)
		})
	}
}

// TestInvalidValuesFail: values the cluster cannot run with fail rendering
// with the chart's message (helm lint shows it too).
func TestInvalidValuesFail(t *testing.T) {
	cases := []struct {
		set, message string
	}{
		{"replicas=4", "replicas must be 3 or 5"},
		{"replicas=2", "replicas must be 3 or 5"},
		{"replicas=1", "replicas must be 3 or 5"},
		{"replicas=7", "replicas must be 3 or 5"},
		{"podAntiAffinity=sometimes", `podAntiAffinity must be "preferred" or "required"`},
		{"readReplicas=-1", "readReplicas must be a whole number"},
		{"readReplicas=two", "readReplicas must be a whole number"},
		{"config.executeWrites=everywhere", `config.executeWrites must be "leader" or "local"`},
	}
	for _, c := range cases {
		t.Run(c.set, func(t *testing.T) {
			out, stderr, err := template(t, nil, c.set)
			if err == nil {
				t.Fatalf("helm template --set %s rendered:\n%s", c.set, out)
			}
			if !strings.Contains(stderr, c.message) {
				t.Fatalf("helm template --set %s failed without the chart's message %q:\n%s", c.set, c.message, stderr)
			}
			// helm lint (3.18) reports a template's fail() as [INFO] and
			// passes: it must still show the chart's message.
			lout, lerr, _ := helm(t, "lint", chartDir, "--kube-version", kubeVersion, "--set", c.set)
			if !strings.Contains(lout+lerr, c.message) {
				t.Fatalf("helm lint --set %s does not show %q:\n%s%s", c.set, c.message, lout, lerr)
			}
		})
	}
}

var (
	serveFlagsOnce sync.Once
	serveFlags     map[string]bool
	serveFlagsErr  error
)

// serveFlagNames lists the flags `trustplane serve -h` prints.
func serveFlagNames(t *testing.T) map[string]bool {
	t.Helper()
	serveFlagsOnce.Do(func() {
		_, stderr, _ := runTrustplane(t, nil, "serve", "-h") // -h exits non-zero
		serveFlags = map[string]bool{}
		re := regexp.MustCompile(`(?m)^\s+-([a-z0-9][a-z0-9-]*)(\s|$)`)
		for _, m := range re.FindAllStringSubmatch(stderr, -1) {
			serveFlags[m[1]] = true
		}
		if len(serveFlags) < 20 || !serveFlags["data-dir"] || !serveFlags["bootstrap-expect"] {
			serveFlagsErr = fmt.Errorf("could not read the flags from trustplane serve -h (found %d):\n%s", len(serveFlags), stderr)
		}
	})
	if serveFlagsErr != nil {
		t.Fatal(serveFlagsErr)
	}
	return serveFlags
}

// envTwin is the serve flag an environment variable sets, or "".
func envTwin(name string) string {
	rest, ok := strings.CutPrefix(name, "TRUSTPLANE_")
	if !ok {
		return ""
	}
	return strings.ToLower(strings.ReplaceAll(rest, "_", "-"))
}

// checkChart checks the chart's own rules on one rendering.
func checkChart(t *testing.T, ms []manifest, objs map[string]any, w want) {
	t.Helper()
	noKeyMaterial(t, ms)

	ss := objs["StatefulSet/trustplane"].(*appsv1.StatefulSet)
	headless := objs["Service/trustplane-headless"].(*corev1.Service)
	client := objs["Service/trustplane"].(*corev1.Service)
	cm := objs["ConfigMap/trustplane-cluster"].(*corev1.ConfigMap)
	podLabels := labels.Set(ss.Spec.Template.Labels)

	// Replicas, bootstrap-expect and the seeds agree.
	if ss.Spec.Replicas == nil || int(*ss.Spec.Replicas) != w.replicas {
		t.Fatalf("StatefulSet replicas %v, want %d", ss.Spec.Replicas, w.replicas)
	}
	if ss.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q, want Parallel (bootstrap-expect needs every node up at once)", ss.Spec.PodManagementPolicy)
	}
	if p := ss.Spec.PersistentVolumeClaimRetentionPolicy; p == nil || p.WhenScaled != appsv1.RetainPersistentVolumeClaimRetentionPolicyType || p.WhenDeleted != appsv1.RetainPersistentVolumeClaimRetentionPolicyType {
		t.Errorf("PVC retention %+v, want Retain when scaled and when deleted", p)
	}
	if ss.Spec.ServiceName != headless.Name || headless.Spec.ClusterIP != corev1.ClusterIPNone || !headless.Spec.PublishNotReadyAddresses {
		t.Errorf("serviceName %q; headless Service %q clusterIP %q publishNotReadyAddresses %v", ss.Spec.ServiceName, headless.Name, headless.Spec.ClusterIP, headless.Spec.PublishNotReadyAddresses)
	}
	for _, svc := range []*corev1.Service{headless, client} {
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) || len(svc.Spec.Selector) == 0 {
			t.Errorf("Service %s selector %v does not select the pods %v", svc.Name, svc.Spec.Selector, podLabels)
		}
	}
	if client.Spec.Type != corev1.ServiceTypeClusterIP || len(client.Spec.Ports) != 1 || client.Spec.Ports[0].Port != 443 || client.Spec.Ports[0].TargetPort != intstr.FromString("api") {
		t.Errorf("client Service: type %s ports %+v; want ClusterIP 443 -> api", client.Spec.Type, client.Spec.Ports)
	}

	pod := ss.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	if !slices.Equal(c.Command, []string{"/trustplane"}) || !slices.Equal(c.Args, []string{"serve"}) {
		t.Errorf("command %q args %q, want /trustplane serve", c.Command, c.Args)
	}
	env := map[string]corev1.EnvVar{}
	flags := serveFlagNames(t)
	for _, e := range c.Env {
		if _, dup := env[e.Name]; dup {
			t.Errorf("env %s set twice", e.Name)
		}
		env[e.Name] = e
		if f := envTwin(e.Name); f == "" || !flags[f] {
			t.Errorf("env %s is no serve flag's TRUSTPLANE_* twin", e.Name)
		}
	}
	fieldRef := func(name, path string) {
		t.Helper()
		if e, ok := env[name]; !ok || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != path {
			t.Errorf("env %s = %+v, want fieldRef %s", name, e, path)
		}
	}
	fieldRef("TRUSTPLANE_NODE_NAME", "metadata.name")
	fieldRef("TRUSTPLANE_ADVERTISE_ADDRESS", "status.podIP")
	fromConfigMap := func(name string) string {
		t.Helper()
		e := env[name]
		if e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil || e.ValueFrom.ConfigMapKeyRef.Name != cm.Name {
			t.Fatalf("env %s = %+v, want a key of ConfigMap %s", name, e, cm.Name)
		}
		v, ok := cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]
		if !ok {
			t.Fatalf("env %s: ConfigMap %s has no key %s", name, cm.Name, e.ValueFrom.ConfigMapKeyRef.Key)
		}
		return v
	}
	if got := fromConfigMap("TRUSTPLANE_BOOTSTRAP_EXPECT"); got != strconv.Itoa(w.replicas) {
		t.Errorf("bootstrap-expect %q, want %d (= replicas)", got, w.replicas)
	}
	gossipPort := containerPort(t, c, "gossip-tcp")
	var wantSeeds []string
	for i := range w.replicas {
		wantSeeds = append(wantSeeds, fmt.Sprintf("trustplane-%d.trustplane-headless.%s.svc.cluster.local:%d", i, namespace, gossipPort))
	}
	if got := fromConfigMap("TRUSTPLANE_JOIN"); got != strings.Join(wantSeeds, ",") {
		t.Errorf("join %q, want every pod's DNS name %q", got, strings.Join(wantSeeds, ","))
	}
	if got := env["TRUSTPLANE_RAFT_ADVERTISE_ADDR"].Value; got != fmt.Sprintf("$(TRUSTPLANE_NODE_NAME).trustplane-headless.%s.svc.cluster.local:%d", namespace, containerPort(t, c, "raft")) {
		t.Errorf("raft advertise address %q: want the pod's stable DNS name", got)
	}
	if got := env["TRUSTPLANE_LEAVE_ON_TERMINATE"].Value; got != "false" {
		t.Errorf("leave-on-terminate %q: a rolling restart must never remove voters", got)
	}
	sans := strings.Split(env["TRUSTPLANE_TLS_SAN"].Value, ",")
	for _, s := range []string{"trustplane." + namespace + ".svc", "trustplane." + namespace + ".svc.cluster.local", "$(TRUSTPLANE_NODE_NAME).trustplane-headless." + namespace + ".svc.cluster.local"} {
		if !slices.Contains(sans, s) {
			t.Errorf("tls-san %q lacks %s", sans, s)
		}
	}
	for name, v := range w.extraEnv {
		if env[name].Value != v {
			t.Errorf("env %s = %q, want %q", name, env[name].Value, v)
		}
	}
	_, hasEnc := env["TRUSTPLANE_ENCRYPTION_PROVIDER_CONFIG"]
	if hasEnc != w.encryption {
		t.Errorf("encryption-provider-config set %v, want %v", hasEnc, w.encryption)
	}

	checkAuthentication(t, objs, env, c, pod, w.authentication)

	// Probes: the unauthenticated health endpoints over HTTPS on the API port.
	_, listenPort, _ := strings.Cut(env["TRUSTPLANE_LISTEN"].Value, ":")
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"startup", c.StartupProbe, "/livez"}, {"liveness", c.LivenessProbe, "/livez"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s probe missing or not an HTTP GET", p.name)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path || g.Scheme != corev1.URISchemeHTTPS || strconv.Itoa(portOf(t, c, g.Port)) != listenPort {
			t.Errorf("%s probe GET %s %s port %v; want %s over HTTPS on the API port %s", p.name, g.Scheme, g.Path, g.Port.String(), p.path, listenPort)
		}
	}

	// Locked down.
	checkSecurity(t, "StatefulSet", pod)
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Error("the nodes' ServiceAccount token is mounted; they never call the host API")
	}

	// Volumes: the CA Secret read-only at --ca-dir, the PVC above --data-dir.
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	var caVol *corev1.Volume
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == "ca" {
			caVol = &pod.Volumes[i]
		}
	}
	if caVol == nil || caVol.Secret == nil || caVol.Secret.SecretName != w.caSecret {
		t.Errorf("ca volume %+v, want Secret %s", caVol, w.caSecret)
	}
	if m := mounts["ca"]; !m.ReadOnly || m.MountPath != env["TRUSTPLANE_CA_DIR"].Value {
		t.Errorf("ca mount %+v, want read-only at --ca-dir %s", m, env["TRUSTPLANE_CA_DIR"].Value)
	}
	if len(ss.Spec.VolumeClaimTemplates) != 1 || ss.Spec.VolumeClaimTemplates[0].Name != "data" {
		t.Fatalf("volumeClaimTemplates %+v, want one named data", ss.Spec.VolumeClaimTemplates)
	}
	if m := mounts["data"]; !strings.HasPrefix(env["TRUSTPLANE_DATA_DIR"].Value, strings.TrimSuffix(m.MountPath, "/")+"/") {
		t.Errorf("data dir %s is not below the PVC mount %s (the node must own and chmod its data dir, which a volume root does not allow)", env["TRUSTPLANE_DATA_DIR"].Value, m.MountPath)
	}

	// Anti-affinity.
	aa := pod.Affinity.PodAntiAffinity
	switch w.antiAffinity {
	case "required":
		if aa == nil || len(aa.RequiredDuringSchedulingIgnoredDuringExecution) != 1 || len(aa.PreferredDuringSchedulingIgnoredDuringExecution) != 0 {
			t.Errorf("anti-affinity %+v, want required only", aa)
		} else if !selects(t, aa.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector, podLabels) {
			t.Error("required anti-affinity does not select the pods")
		}
	default:
		if aa == nil || len(aa.PreferredDuringSchedulingIgnoredDuringExecution) != 1 || len(aa.RequiredDuringSchedulingIgnoredDuringExecution) != 0 {
			t.Errorf("anti-affinity %+v, want preferred only", aa)
		} else if !selects(t, aa.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector, podLabels) {
			t.Error("preferred anti-affinity does not select the pods")
		}
	}

	// One node at a time.
	pdb := objs["PodDisruptionBudget/trustplane"].(*policyv1.PodDisruptionBudget)
	if pdb.Spec.MaxUnavailable == nil || *pdb.Spec.MaxUnavailable != intstr.FromInt32(1) || pdb.Spec.MinAvailable != nil {
		t.Errorf("PDB maxUnavailable %v minAvailable %v, want maxUnavailable 1", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
	}
	if !selects(t, pdb.Spec.Selector, podLabels) {
		t.Error("the PDB does not select the pods")
	}

	checkHook(t, ms, objs, w)
	checkReadReplicas(t, objs, ss, w)

	_, np := objs["NetworkPolicy/trustplane"]
	if np != w.networkPolicy {
		t.Errorf("NetworkPolicy rendered %v, want %v", np, w.networkPolicy)
	}
	if np {
		var hookPod labels.Set
		if job, ok := objs["Job/trustplane-certs-init"].(*batchv1.Job); ok {
			hookPod = labels.Set(job.Spec.Template.Labels)
		}
		checkNetworkPolicy(t, only(t, ms, "NetworkPolicy", "trustplane"), c, podLabels, hookPod)
	}
	_, sm := objs["ServiceMonitor/trustplane"]
	if sm != w.serviceMonitor {
		t.Errorf("ServiceMonitor rendered %v, want %v", sm, w.serviceMonitor)
	}
	if sm {
		var mon struct {
			Spec struct {
				Selector struct {
					MatchLabels map[string]string `json:"matchLabels"`
				} `json:"selector"`
				Endpoints []struct {
					Port, Scheme, Path string
				} `json:"endpoints"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal(only(t, ms, "ServiceMonitor", "trustplane").YAML, &mon); err != nil {
			t.Fatal(err)
		}
		if !labels.SelectorFromSet(mon.Spec.Selector.MatchLabels).Matches(labels.Set(client.Labels)) || len(mon.Spec.Endpoints) != 1 || mon.Spec.Endpoints[0].Port != client.Spec.Ports[0].Name || mon.Spec.Endpoints[0].Scheme != "https" {
			t.Errorf("ServiceMonitor %+v does not scrape the client Service's %s port over https", mon.Spec, client.Spec.Ports[0].Name)
		}
	}
}

// checkHook checks the certs-init hook: present exactly without
// existingSecret, ordered RBAC before the Job, least privilege, locked down.
func checkHook(t *testing.T, ms []manifest, objs map[string]any, w want) {
	t.Helper()
	job, hasJob := objs["Job/trustplane-certs-init"].(*batchv1.Job)
	if hasJob {
		checkHookPodSelectedByNone(t, objs, labels.Set(job.Spec.Template.Labels))
	}
	checkHookObjects(t, ms, objs, w)
}

// checkHookPodSelectedByNone: the hook's pod matches none of the chart's
// selectors. The PodDisruptionBudget's would block every drain (the
// disruption controller fails on a pod owned by a Job), the Services'
// would make it an endpoint, the NetworkPolicy's peer selector would let
// it reach the Raft and gossip ports.
func checkHookPodSelectedByNone(t *testing.T, objs map[string]any, hookPod labels.Set) {
	t.Helper()
	ss := objs["StatefulSet/trustplane"].(*appsv1.StatefulSet)
	if s, err := metav1.LabelSelectorAsSelector(ss.Spec.Selector); err != nil || s.Matches(hookPod) {
		t.Errorf("the StatefulSet's selector %v selects the certs-init pod %v", ss.Spec.Selector, hookPod)
	}
	if pdb, ok := objs["PodDisruptionBudget/trustplane"].(*policyv1.PodDisruptionBudget); ok {
		if s, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err != nil || s.Matches(hookPod) {
			t.Errorf("the PodDisruptionBudget selects the certs-init pod %v: drains and evictions would fail", hookPod)
		}
	}
	for _, name := range []string{"Service/trustplane", "Service/trustplane-headless"} {
		if svc := objs[name].(*corev1.Service); labels.SelectorFromSet(svc.Spec.Selector).Matches(hookPod) {
			t.Errorf("%s selects the certs-init pod %v", name, hookPod)
		}
	}
	if hookPod["app.kubernetes.io/instance"] != releaseName || hookPod["app.kubernetes.io/component"] != "certs-init" {
		t.Errorf("the certs-init pod's labels %v do not name its release and component", hookPod)
	}
}

func checkHookObjects(t *testing.T, ms []manifest, objs map[string]any, w want) {
	t.Helper()
	job, hasJob := objs["Job/trustplane-certs-init"].(*batchv1.Job)
	hookObjs := []string{"ServiceAccount/trustplane-certs-init", "Role/trustplane-certs-init", "RoleBinding/trustplane-certs-init", "Job/trustplane-certs-init"}
	for _, k := range hookObjs {
		if _, ok := objs[k]; ok != w.hook {
			t.Errorf("%s rendered %v, want %v", k, ok, w.hook)
		}
	}
	if !w.hook {
		return
	}
	if !hasJob {
		t.Fatal("no certs-init Job")
	}
	weight := func(kind string) int {
		t.Helper()
		var meta struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(only(t, ms, kind, "trustplane-certs-init").YAML, &meta); err != nil {
			t.Fatal(err)
		}
		a := meta.Metadata.Annotations
		policies := strings.Split(a["helm.sh/hook-delete-policy"], ",")
		slices.Sort(policies)
		if !strings.Contains(a["helm.sh/hook"], "pre-install") || !slices.Equal(policies, []string{"before-hook-creation", "hook-succeeded"}) {
			t.Errorf("%s hook annotations %v: want it deleted before the next run and once the hooks succeeded", kind, a)
		}
		n, err := strconv.Atoi(a["helm.sh/hook-weight"])
		if err != nil {
			t.Fatalf("%s hook weight: %v", kind, err)
		}
		return n
	}
	sa, role, rb, jw := weight("ServiceAccount"), weight("Role"), weight("RoleBinding"), weight("Job")
	if max(sa, role) >= rb || rb >= jw {
		t.Errorf("hook weights ServiceAccount %d Role %d RoleBinding %d Job %d: the RBAC must come before the Job", sa, role, rb, jw)
	}
	r := objs["Role/trustplane-certs-init"].(*rbacv1.Role)
	for _, rule := range r.Rules {
		if !slices.Equal(rule.APIGroups, []string{""}) || !slices.Equal(rule.Resources, []string{"secrets"}) {
			t.Errorf("the hook's Role grants %+v; it needs Secrets only", rule)
		}
		for _, v := range rule.Verbs {
			if v != "create" && v != "get" {
				t.Errorf("the hook's Role grants %s on Secrets; it needs create and get only", v)
			}
			if v == "get" && !slices.Equal(rule.ResourceNames, []string{w.caSecret}) {
				t.Errorf("the hook may get Secrets %v, want only %s", rule.ResourceNames, w.caSecret)
			}
		}
	}
	pod := job.Spec.Template.Spec
	if pod.ServiceAccountName != "trustplane-certs-init" {
		t.Errorf("the Job runs as %q, not the hook's ServiceAccount", pod.ServiceAccountName)
	}
	c := pod.Containers[0]
	wantArgs := []string{"certs", "init", "--secret", w.caSecret, "--namespace", namespace}
	if !slices.Equal(c.Command, []string{"/trustplane"}) || !slices.Equal(c.Args, wantArgs) {
		t.Errorf("the Job runs %q %q, want /trustplane %q", c.Command, c.Args, wantArgs)
	}
	checkSecurity(t, "Job", pod)
}

// checkSecurity: the image's non-root user, read-only root, no privilege escalation,
// no capabilities, the runtime's seccomp profile.
func checkSecurity(t *testing.T, what string, pod corev1.PodSpec) {
	t.Helper()
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser != image.NonRootUID || psc.FSGroup == nil {
		t.Errorf("%s pod securityContext %+v: want runAsNonRoot, runAsUser %d and an fsGroup", what, psc, image.NonRootUID)
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("%s container %s has no securityContext", what, c.Name)
			continue
		}
		if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != image.NonRootUID {
			t.Errorf("%s container %s: runAsNonRoot %v runAsUser %v, want true and %d", what, c.Name, sc.RunAsNonRoot, sc.RunAsUser, image.NonRootUID)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s container %s: root filesystem is writable", what, c.Name)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s container %s: privilege escalation is allowed", what, c.Name)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s container %s is privileged", what, c.Name)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s container %s capabilities %+v, want drop ALL and add none", what, c.Name, sc.Capabilities)
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil && psc != nil {
			seccomp = psc.SeccompProfile
		}
		if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s container %s seccomp %+v, want RuntimeDefault", what, c.Name, seccomp)
		}
	}
}

// checkNetworkPolicy: Raft, gossip (TCP and UDP) and the API from the
// pods themselves; the API port from apiFrom; and the Raft and gossip
// ports from nothing else: every rule names its ports, and a rule that
// opens a Raft or gossip port admits the trustplane pods alone (not the
// certs-init hook's pod, hookPod, when there is one).
func checkNetworkPolicy(t *testing.T, m manifest, c corev1.Container, podLabels, hookPod labels.Set) {
	t.Helper()
	var np struct {
		Spec struct {
			PodSelector struct {
				MatchLabels map[string]string `json:"matchLabels"`
			} `json:"podSelector"`
			PolicyTypes []string `json:"policyTypes"`
			Ingress     []struct {
				From []struct {
					PodSelector *struct {
						MatchLabels map[string]string `json:"matchLabels"`
					} `json:"podSelector"`
					NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector"`
					IPBlock           *struct {
						CIDR string `json:"cidr"`
					} `json:"ipBlock"`
				} `json:"from"`
				Ports []struct {
					Port     int    `json:"port"`
					Protocol string `json:"protocol"`
				} `json:"ports"`
			} `json:"ingress"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(m.YAML, &np); err != nil {
		t.Fatal(err)
	}
	if !labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(podLabels) {
		t.Error("the NetworkPolicy does not apply to the pods")
	}
	if !slices.Contains(np.Spec.PolicyTypes, "Ingress") {
		t.Errorf("the NetworkPolicy's policyTypes %v leave ingress unrestricted", np.Spec.PolicyTypes)
	}
	internal := map[int]bool{containerPort(t, c, "raft"): true, containerPort(t, c, "gossip-tcp"): true, containerPort(t, c, "gossip-udp"): true}
	peerPorts := map[string]bool{}
	apiOpen := false
	for i, in := range np.Spec.Ingress {
		fromPods := len(in.From) == 1 && in.From[0].PodSelector != nil && in.From[0].NamespaceSelector == nil && in.From[0].IPBlock == nil &&
			len(in.From[0].PodSelector.MatchLabels) > 0 && labels.SelectorFromSet(in.From[0].PodSelector.MatchLabels).Matches(podLabels)
		if fromPods && hookPod != nil && labels.SelectorFromSet(in.From[0].PodSelector.MatchLabels).Matches(hookPod) {
			t.Errorf("ingress rule %d admits the certs-init pod %v as a peer", i, hookPod)
		}
		if len(in.Ports) == 0 {
			t.Errorf("ingress rule %d names no port, so it opens every port, Raft and gossip included", i)
		}
		for _, p := range in.Ports {
			if fromPods {
				peerPorts[fmt.Sprintf("%d/%s", p.Port, p.Protocol)] = true
				continue
			}
			if internal[p.Port] {
				t.Errorf("ingress rule %d opens the Raft or gossip port %d/%s to sources other than the trustplane pods", i, p.Port, p.Protocol)
			}
			if p.Port == containerPort(t, c, "api") {
				apiOpen = true
			}
		}
	}
	for _, want := range []string{
		fmt.Sprintf("%d/TCP", containerPort(t, c, "raft")), fmt.Sprintf("%d/TCP", containerPort(t, c, "gossip-tcp")),
		fmt.Sprintf("%d/UDP", containerPort(t, c, "gossip-udp")), fmt.Sprintf("%d/TCP", containerPort(t, c, "api")),
	} {
		if !peerPorts[want] {
			t.Errorf("the NetworkPolicy does not let the pods reach each other on %s", want)
		}
	}
	if !apiOpen {
		t.Error("the NetworkPolicy does not open the API port to clients")
	}
}

// noKeyMaterial: no Secret is rendered and no manifest holds a PEM block
// or anything shaped like a gossip key (base64 of 32 bytes).
func noKeyMaterial(t *testing.T, ms []manifest) {
	t.Helper()
	b64 := regexp.MustCompile(`[A-Za-z0-9+/]{43}=`)
	for _, m := range ms {
		if m.Kind == "Secret" {
			t.Errorf("%s is rendered: key material must never be in a manifest", m)
		}
		s := string(m.YAML)
		if strings.Contains(s, "-----BEGIN") || strings.Contains(s, "PRIVATE KEY") {
			t.Errorf("%s holds a PEM block", m)
		}
		for _, cand := range b64.FindAllString(s, -1) {
			if k, err := base64.StdEncoding.DecodeString(cand); err == nil && len(k) == 32 {
				t.Errorf("%s holds %q, shaped like a gossip key", m, cand)
			}
		}
	}
}

// selects reports whether sel is a valid, non-empty selector matching set.
func selects(t *testing.T, sel *metav1.LabelSelector, set labels.Set) bool {
	t.Helper()
	if sel == nil {
		return false
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		t.Errorf("selector %v: %v", sel, err)
		return false
	}
	return !s.Empty() && s.Matches(set)
}

// containerPort is the number of c's port called name.
func containerPort(t *testing.T, c corev1.Container, name string) int {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return int(p.ContainerPort)
		}
	}
	t.Fatalf("container %s has no port %s", c.Name, name)
	return 0
}

// portOf resolves a probe's port, a number or a container port's name.
func portOf(t *testing.T, c corev1.Container, p intstr.IntOrString) int {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntValue()
	}
	return containerPort(t, c, p.StrVal)
}

// checkAuthentication: with config.authentication set, the nodes read kube's
// AuthenticationConfiguration from the chart's ConfigMap, mounted read-only
// where --authentication-config points, and public discovery opens the two
// discovery documents and nothing else; without it there is neither.
func checkAuthentication(t *testing.T, objs map[string]any, env map[string]corev1.EnvVar, c corev1.Container, pod corev1.PodSpec, want bool) {
	t.Helper()
	obj, hasCM := objs["ConfigMap/trustplane-authentication"]
	path, hasEnv := env["TRUSTPLANE_AUTHENTICATION_CONFIG"]
	if !want {
		if hasCM || hasEnv {
			t.Errorf("authentication ConfigMap %v, --authentication-config %v: want neither", hasCM, hasEnv)
		}
		return
	}
	if !hasCM || !hasEnv {
		t.Fatalf("authentication ConfigMap %v, --authentication-config %v: want both", hasCM, hasEnv)
	}
	var mount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].Name == "authentication" {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil || !mount.ReadOnly || !strings.HasPrefix(path.Value, mount.MountPath+"/") {
		t.Fatalf("authentication mount %+v, want read-only above %s", mount, path.Value)
	}
	key := strings.TrimPrefix(path.Value, mount.MountPath+"/")
	var vol *corev1.Volume
	for i := range pod.Volumes {
		if pod.Volumes[i].Name == "authentication" {
			vol = &pod.Volumes[i]
		}
	}
	if vol == nil || vol.ConfigMap == nil || vol.ConfigMap.Name != "trustplane-authentication" {
		t.Fatalf("authentication volume %+v, want the ConfigMap", vol)
	}
	var cfg struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Anonymous  struct {
			Enabled    bool `json:"enabled"`
			Conditions []struct {
				Path string `json:"path"`
			} `json:"conditions"`
		} `json:"anonymous"`
		JWT []map[string]any `json:"jwt"`
	}
	data := obj.(*corev1.ConfigMap).Data[key]
	if err := yaml.UnmarshalStrict([]byte(data), &cfg); err != nil {
		t.Fatalf("%s is not an AuthenticationConfiguration: %v\n%s", key, err, data)
	}
	var paths []string
	for _, c := range cfg.Anonymous.Conditions {
		paths = append(paths, c.Path)
	}
	if cfg.APIVersion != "apiserver.config.k8s.io/v1beta1" || cfg.Kind != "AuthenticationConfiguration" || !cfg.Anonymous.Enabled ||
		strings.Join(paths, ",") != "/.well-known/openid-configuration,/openid/v1/jwks" || len(cfg.JWT) != 1 {
		t.Fatalf("authentication config %+v", cfg)
	}
}

// checkReadReplicas checks the read replicas' StatefulSet: rendered
// exactly with readReplicas; its pods are the voters' but for the role
// (--role replica, no bootstrap) and a component label; the Services, the
// PDB and the NetworkPolicy cover them; its selector never takes a voter;
// each kind spreads away from its own kind only.
func checkReadReplicas(t *testing.T, objs map[string]any, voters *appsv1.StatefulSet, w want) {
	t.Helper()
	obj, ok := objs["StatefulSet/trustplane-replica"]
	if ok != (w.readReplicas > 0) {
		t.Fatalf("read replicas' StatefulSet rendered %v, want %v", ok, w.readReplicas > 0)
	}
	if !ok {
		return
	}
	rs := obj.(*appsv1.StatefulSet)
	voterPod, replicaPod := labels.Set(voters.Spec.Template.Labels), labels.Set(rs.Spec.Template.Labels)
	if rs.Spec.Replicas == nil || int(*rs.Spec.Replicas) != w.readReplicas {
		t.Errorf("read replicas %v, want %d", rs.Spec.Replicas, w.readReplicas)
	}
	if rs.Spec.ServiceName != voters.Spec.ServiceName {
		t.Errorf("read replicas' serviceName %q, want the headless Service %q (their Raft addresses are its DNS names)", rs.Spec.ServiceName, voters.Spec.ServiceName)
	}
	if !selects(t, rs.Spec.Selector, replicaPod) || selects(t, rs.Spec.Selector, voterPod) {
		t.Errorf("read replicas' selector %v must take its pods %v and never a voter %v", rs.Spec.Selector, replicaPod, voterPod)
	}
	for _, svc := range []string{"Service/trustplane", "Service/trustplane-headless"} {
		if sel := objs[svc].(*corev1.Service).Spec.Selector; !labels.SelectorFromSet(sel).Matches(replicaPod) {
			t.Errorf("%s does not select the read replicas", svc)
		}
	}
	if !selects(t, objs["PodDisruptionBudget/trustplane"].(*policyv1.PodDisruptionBudget).Spec.Selector, replicaPod) {
		t.Error("the PDB does not cover the read replicas")
	}
	if np, ok := objs["NetworkPolicy/trustplane"].(*networkingv1.NetworkPolicy); ok && !selects(t, &np.Spec.PodSelector, replicaPod) {
		t.Error("the NetworkPolicy does not cover the read replicas")
	}
	antiAffinity := func(ss *appsv1.StatefulSet) *metav1.LabelSelector {
		aa := ss.Spec.Template.Spec.Affinity.PodAntiAffinity
		if len(aa.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			return aa.RequiredDuringSchedulingIgnoredDuringExecution[0].LabelSelector
		}
		return aa.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.LabelSelector
	}
	if sel := antiAffinity(voters); !selects(t, sel, voterPod) || selects(t, sel, replicaPod) {
		t.Errorf("voters' anti-affinity %v must spread voters and ignore read replicas", sel)
	}
	if sel := antiAffinity(rs); !selects(t, sel, replicaPod) || selects(t, sel, voterPod) {
		t.Errorf("read replicas' anti-affinity %v must spread read replicas and ignore voters", sel)
	}
	envOf := func(ss *appsv1.StatefulSet) map[string]corev1.EnvVar {
		out := map[string]corev1.EnvVar{}
		for _, e := range ss.Spec.Template.Spec.Containers[0].Env {
			out[e.Name] = e
		}
		return out
	}
	ve, re := envOf(voters), envOf(rs)
	if re["TRUSTPLANE_ROLE"].Value != "replica" || re["TRUSTPLANE_BOOTSTRAP_EXPECT"].Value != "0" {
		t.Errorf("read replicas' role %+v, bootstrap-expect %+v; want replica, 0", re["TRUSTPLANE_ROLE"], re["TRUSTPLANE_BOOTSTRAP_EXPECT"])
	}
	if _, ok := ve["TRUSTPLANE_ROLE"]; ok {
		t.Error("the voters carry a role")
	}
	for name, e := range ve {
		if name == "TRUSTPLANE_BOOTSTRAP_EXPECT" {
			continue
		}
		if !equality.Semantic.DeepEqual(re[name], e) {
			t.Errorf("read replicas' %s = %+v, want the voters' %+v", name, re[name], e)
		}
	}
	checkSecurity(t, "read replicas' StatefulSet", rs.Spec.Template.Spec)
	if len(rs.Spec.VolumeClaimTemplates) != 1 || rs.Spec.VolumeClaimTemplates[0].Name != "data" {
		t.Errorf("read replicas' volumeClaimTemplates %+v, want one named data", rs.Spec.VolumeClaimTemplates)
	}
}
