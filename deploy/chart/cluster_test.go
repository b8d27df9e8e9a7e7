package chart

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"k8s.io/kubernetes/third_party/forked/golang/expansion"
)

// podIPs stand in for the voters' pods' IPs: loopback addresses no other
// test uses (the chaos tool has 127.0.0.11-13 and 127.0.0.21 up). The
// first three are the default install; the last two the scale-up to five.
// replicaIP is a read replica's.
var podIPs = []string{"127.0.0.31", "127.0.0.32", "127.0.0.33", "127.0.0.34", "127.0.0.35"}

const replicaIP = "127.0.0.36"

// voterSet is the voters' StatefulSet in the rendered release.
const voterSet = "trustplane"

// initialPods is the chart's default replicas, the cluster the test forms.
const initialPods = 3

// runTrustplane runs the built trustplane binary with exactly env (nil:
// the test's environment) and returns stdout, stderr and the error.
func runTrustplane(t *testing.T, env []string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, trustplaneBin, args...)
	if env != nil {
		cmd.Env = env
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// localPod is one pod of the StatefulSet run as a local process.
type localPod struct {
	name, ip string
	env      []string          // the container's environment, resolved, in order
	vars     map[string]string // the same by name
	args     []string
	log      string
	cmd      *exec.Cmd
	done     chan struct{}
}

// TestRenderedStatefulSetFormsACluster runs the rendered StatefulSet's
// container (its command, arguments and environment) as three real
// processes, one per pod, and checks that they form one Raft cluster that
// takes a write on one node and serves it from a follower. The kubelet's
// part is done here: fieldRefs (pod name, pod IP), configMapKeyRefs from
// the rendered ConfigMap and $(VAR) expansion (with kube's own expansion
// code); the pod network is stood in for by mapping the pods' DNS names
// and 0.0.0.0 binds to the pod's loopback IP, and the volumes by temporary
// directories (the CA Secret's by `trustplane certs init --dir`).
func TestRenderedStatefulSetFormsACluster(t *testing.T) {
	ms := render(t, nil)
	ss := &appsv1.StatefulSet{}
	decodeStrict(t, only(t, ms, "StatefulSet", "trustplane"), ss)
	cm := &corev1.ConfigMap{}
	decodeStrict(t, only(t, ms, "ConfigMap", "trustplane-cluster"), cm)
	if int(*ss.Spec.Replicas) != initialPods {
		t.Fatalf("default replicas %d, the test runs %d pods", *ss.Spec.Replicas, initialPods)
	}
	c := ss.Spec.Template.Spec.Containers[0]
	if len(c.Command) == 0 || c.Command[0] != "/trustplane" {
		t.Fatalf("container command %q: the image's binary is /trustplane", c.Command)
	}
	for _, p := range c.Ports {
		for _, ip := range append(slices.Clone(podIPs), replicaIP) {
			checkFree(t, p.Protocol, net.JoinHostPort(ip, strconv.Itoa(int(p.ContainerPort))))
		}
	}

	caDir := filepath.Join(t.TempDir(), "ca")
	if _, stderr, err := runTrustplane(t, nil, "certs", "init", "--dir", caDir); err != nil {
		t.Fatalf("trustplane certs init: %v\n%s", err, stderr)
	}
	podDomain := fmt.Sprintf("%s.%s.svc.cluster.local", ss.Spec.ServiceName, namespace)
	var pods []*localPod
	for i, ip := range podIPs[:initialPods] {
		pods = append(pods, podFor(t, ss, cm, i, ip, podDomain, caDir))
	}
	for _, p := range pods {
		p.start(t)
	}
	t.Cleanup(func() {
		for _, p := range pods {
			p.stop()
		}
		if t.Failed() {
			for _, p := range pods {
				t.Logf("log of %s:\n%s", p.name, tail(p.log))
			}
		}
	})

	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(filepath.Join(caDir, "ca.crt"))
	if err != nil || !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("reading the cluster CA: %v", err)
	}
	// The readiness probe as the kubelet sends it, to every pod (with the
	// CA: the serving certificate must cover the pod IP).
	probe := c.ReadinessProbe.HTTPGet
	deadline := time.Now().Add(120 * time.Second)
	for _, p := range pods {
		url := fmt.Sprintf("%s://%s%s", strings.ToLower(string(probe.Scheme)), net.JoinHostPort(p.ip, strconv.Itoa(portOf(t, c, probe.Port))), probe.Path)
		p.waitReady(t, url, pool, deadline)
	}

	// What NOTES.txt tells operators: the admin kubeconfig from
	// `trustplane kubeconfig` inside the pod (whose environment names the
	// data dir), pointed at the node.
	kubeconfigs := map[string]string{}
	for _, p := range pods {
		out, stderr, err := runTrustplane(t, []string{"TRUSTPLANE_DATA_DIR=" + p.vars["TRUSTPLANE_DATA_DIR"]}, "kubeconfig", "--server", "https://"+p.vars["TRUSTPLANE_LISTEN"])
		if err != nil {
			t.Fatalf("%s: trustplane kubeconfig: %v\n%s", p.name, err, stderr)
		}
		path := filepath.Join(t.TempDir(), p.name+".kubeconfig")
		if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		kubeconfigs[p.name] = path
	}

	// One leader, known to all.
	var leader string
	var followers []string
	waitUntil(t, 60*time.Second, "every node to know the same leader", func() bool {
		leader, followers = "", nil
		for _, p := range pods {
			out, err := kubectl(t, kubeconfigs[p.name], "get", "--raw", "/debug/trustplane/raft")
			if err != nil {
				return false
			}
			var st struct{ State, Leader string }
			if json.Unmarshal([]byte(out), &st) != nil || st.Leader == "" || (leader != "" && st.Leader != leader) {
				return false
			}
			leader = st.Leader
			if st.State == "Follower" {
				followers = append(followers, p.name)
			}
		}
		return len(followers) == len(pods)-1
	})
	sort.Strings(followers)

	// A write through one follower (forwarded to the leader), read back
	// from the other.
	if out, err := kubectl(t, kubeconfigs[followers[0]], "create", "configmap", "chart-e2e", "-n", "default", "--from-literal=written-on="+followers[0]); err != nil {
		t.Fatalf("kubectl create configmap on %s: %v\n%s", followers[0], err, out)
	}
	out, err := kubectl(t, kubeconfigs[followers[1]], "get", "configmap", "chart-e2e", "-n", "default", "-o", "jsonpath={.data.written-on}")
	if err != nil || out != followers[0] {
		t.Fatalf("kubectl get configmap on %s: %v %q, want %q", followers[1], err, out, followers[0])
	}

	// The certs-init hook with its own RBAC: its ServiceAccount, Role and
	// RoleBinding applied to this cluster, its Job's exact command run with
	// that ServiceAccount's token (standing in for the in-cluster
	// configuration): the Role must be enough to create the CA Secret, and
	// a second run (a pre-upgrade hook) must find it and change nothing.
	t.Run("certs-init hook", func(t *testing.T) {
		admin := kubeconfigs[leader]
		if out, err := kubectl(t, admin, "create", "namespace", namespace); err != nil {
			t.Fatalf("kubectl create namespace: %v\n%s", err, out)
		}
		var rbac []string
		for _, kind := range []string{"ServiceAccount", "Role", "RoleBinding"} {
			rbac = append(rbac, string(only(t, ms, kind, "trustplane-certs-init").YAML))
		}
		rbacFile := filepath.Join(t.TempDir(), "rbac.yaml")
		if err := os.WriteFile(rbacFile, []byte(strings.Join(rbac, "\n---\n")), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := kubectl(t, admin, "create", "-f", rbacFile); err != nil {
			t.Fatalf("kubectl create the hook's RBAC: %v\n%s", err, out)
		}
		token, err := kubectl(t, admin, "create", "token", "trustplane-certs-init", "-n", namespace)
		if err != nil {
			t.Fatalf("kubectl create token: %v\n%s", err, token)
		}
		hookKubeconfig := filepath.Join(t.TempDir(), "hook.kubeconfig")
		kc := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: tp\n  cluster:\n    server: https://%s\n    certificate-authority: %s\nusers:\n- name: hook\n  user:\n    token: %s\ncontexts:\n- name: tp\n  context: {cluster: tp, user: hook, namespace: %s}\ncurrent-context: tp\n",
			pods[0].vars["TRUSTPLANE_LISTEN"], filepath.Join(caDir, "ca.crt"), token, namespace)
		if err := os.WriteFile(hookKubeconfig, []byte(kc), 0o600); err != nil {
			t.Fatal(err)
		}
		job := &batchv1.Job{}
		decodeStrict(t, only(t, ms, "Job", "trustplane-certs-init"), job)
		jc := job.Spec.Template.Spec.Containers[0]
		if len(jc.Command) != 1 || jc.Command[0] != "/trustplane" || len(jc.Env) != 0 {
			t.Fatalf("the hook runs %q with env %v; the test runs /trustplane with no environment", jc.Command, jc.Env)
		}
		args := append(slices.Clone(jc.Args), "--kubeconfig", hookKubeconfig)
		for run := 1; run <= 2; run++ {
			out, stderr, err := runTrustplane(t, []string{"TMPDIR=" + t.TempDir()}, args...)
			if err != nil {
				t.Fatalf("hook run %d: %v\n%s%s", run, err, out, stderr)
			}
			if run == 2 && !strings.Contains(out, "left as it is") {
				t.Fatalf("second hook run did not keep the Secret:\n%s", out)
			}
		}
		keys, err := kubectl(t, admin, "get", "secret", "trustplane-ca", "-n", namespace, "-o", "go-template={{range $k, $v := .data}}{{$k}} {{end}}")
		if err != nil || keys != "ca.crt ca.key gossip.key node-ca.crt node-ca.key" {
			t.Fatalf("the hook's Secret has keys %q (%v), want the five CA files", keys, err)
		}
		// The Role allows nothing more: not reading another Secret.
		if out, err := kubectl(t, hookKubeconfig, "get", "secret", "other", "-n", namespace); err == nil || !strings.Contains(out, "forbidden") {
			t.Fatalf("the hook's ServiceAccount may read other Secrets: %v\n%s", err, out)
		}
	})

	// helm upgrade --set replicas=5, then back to 3, as the chart README
	// describes it: the new pods join and become voters without a restart
	// of the running ones; before scaling down, the operator removes the
	// two highest ordinals with trustplane members remove while all five
	// are healthy, then their pods go, leaving three voters that hold
	// every write and take new ones.
	t.Run("scale to 5 and back to 3", func(t *testing.T) {
		admin := kubeconfigs[pods[0].name]
		ms5 := render(t, nil, "replicas=5")
		ss5 := &appsv1.StatefulSet{}
		decodeStrict(t, only(t, ms5, "StatefulSet", "trustplane"), ss5)
		cm5 := &corev1.ConfigMap{}
		decodeStrict(t, only(t, ms5, "ConfigMap", "trustplane-cluster"), cm5)
		if !equality.Semantic.DeepEqual(ss.Spec.Template, ss5.Spec.Template) {
			t.Fatal("replicas=5 changes the pod template: helm upgrade would restart the running nodes while the new ones join")
		}
		var added []*localPod
		for i := initialPods; i < len(podIPs); i++ {
			p := podFor(t, ss5, cm5, i, podIPs[i], podDomain, caDir)
			p.start(t)
			added = append(added, p)
		}
		t.Cleanup(func() {
			for _, p := range added {
				p.stop()
			}
		})
		for _, p := range added {
			url := fmt.Sprintf("%s://%s%s", strings.ToLower(string(probe.Scheme)), net.JoinHostPort(p.ip, strconv.Itoa(portOf(t, c, probe.Port))), probe.Path)
			p.waitReady(t, url, pool, time.Now().Add(120*time.Second))
		}
		voters := func() []string {
			out, err := kubectl(t, admin, "get", "--raw", "/debug/trustplane/members")
			if err != nil {
				return nil
			}
			var members []struct {
				Name  string
				Voter bool
			}
			if json.Unmarshal([]byte(out), &members) != nil {
				return nil
			}
			var names []string
			for _, m := range members {
				if m.Voter {
					names = append(names, m.Name)
				}
			}
			sort.Strings(names)
			return names
		}
		want5 := []string{"trustplane-0", "trustplane-1", "trustplane-2", "trustplane-3", "trustplane-4"}
		waitUntil(t, 90*time.Second, "five voters after the scale-up", func() bool { return slices.Equal(voters(), want5) })
		if out, err := kubectl(t, kubeconfigs[followers[0]], "create", "configmap", "five-voters", "-n", "default"); err != nil {
			t.Fatalf("a write with five voters: %v\n%s", err, out)
		}

		// The README's order: remove the two members while all five are
		// healthy, then let the scale-down delete their pods.
		for _, p := range []*localPod{added[1], added[0]} {
			if out, stderr, err := runTrustplane(t, nil, "members", "--kubeconfig", admin, "remove", p.name); err != nil {
				t.Fatalf("trustplane members remove %s: %v\n%s%s", p.name, err, out, stderr)
			}
		}
		want3 := []string{"trustplane-0", "trustplane-1", "trustplane-2"}
		waitUntil(t, 60*time.Second, "three voters after the removals", func() bool { return slices.Equal(voters(), want3) })
		for _, p := range added {
			p.stop()
		}
		for _, p := range pods {
			out, err := kubectl(t, kubeconfigs[p.name], "get", "configmap", "five-voters", "-n", "default", "-o", "name")
			if err != nil || out != "configmap/five-voters" {
				t.Fatalf("%s after the scale-down: %v %q", p.name, err, out)
			}
		}
		if out, err := kubectl(t, admin, "create", "configmap", "three-voters", "-n", "default"); err != nil {
			t.Fatalf("a write with three voters: %v\n%s", err, out)
		}
	})

	// helm upgrade --set readReplicas=1: the voters' pod template does not
	// change (no voter restarts), and the replica's pod, run as rendered,
	// joins as a non-voter, serves a linearizable read of a write made
	// before it came, and takes a write of its own.
	t.Run("a read replica", func(t *testing.T) {
		admin := kubeconfigs[pods[0].name]
		msR := render(t, nil, "readReplicas=1")
		ssR := &appsv1.StatefulSet{}
		decodeStrict(t, only(t, msR, "StatefulSet", "trustplane"), ssR)
		if !equality.Semantic.DeepEqual(ss.Spec.Template, ssR.Spec.Template) {
			t.Fatal("readReplicas=1 changes the voters' pod template: helm upgrade would restart them")
		}
		rs := &appsv1.StatefulSet{}
		decodeStrict(t, only(t, msR, "StatefulSet", "trustplane-replica"), rs)
		r := podFor(t, rs, cm, 0, replicaIP, podDomain, caDir)
		r.start(t)
		t.Cleanup(func() {
			r.stop()
			if t.Failed() {
				t.Logf("log of %s:\n%s", r.name, tail(r.log))
			}
		})
		url := fmt.Sprintf("%s://%s%s", strings.ToLower(string(probe.Scheme)), net.JoinHostPort(r.ip, strconv.Itoa(portOf(t, c, probe.Port))), probe.Path)
		r.waitReady(t, url, pool, time.Now().Add(120*time.Second))
		waitUntil(t, 60*time.Second, "the replica among the members as a non-voter", func() bool {
			out, err := kubectl(t, admin, "get", "--raw", "/debug/trustplane/members")
			if err != nil {
				return false
			}
			var members []struct {
				Name           string
				Voter, Replica bool
			}
			if json.Unmarshal([]byte(out), &members) != nil {
				return false
			}
			for _, m := range members {
				if m.Name == r.name {
					return m.Replica && !m.Voter
				}
			}
			return false
		})
		out, stderr, err := runTrustplane(t, []string{"TRUSTPLANE_DATA_DIR=" + r.vars["TRUSTPLANE_DATA_DIR"]}, "kubeconfig", "--server", "https://"+r.vars["TRUSTPLANE_LISTEN"])
		if err != nil {
			t.Fatalf("%s: trustplane kubeconfig: %v\n%s", r.name, err, stderr)
		}
		rk := filepath.Join(t.TempDir(), "replica.kubeconfig")
		if err := os.WriteFile(rk, []byte(out), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := kubectl(t, rk, "get", "configmap", "chart-e2e", "-n", "default", "-o", "jsonpath={.data.written-on}"); err != nil || got != followers[0] {
			t.Fatalf("a read on the replica: %v %q", err, got)
		}
		if got, err := kubectl(t, rk, "create", "configmap", "through-replica", "-n", "default"); err != nil {
			t.Fatalf("a write through the replica: %v\n%s", err, got)
		}
		if got, err := kubectl(t, admin, "get", "configmap", "through-replica", "-n", "default", "-o", "name"); err != nil || got != "configmap/through-replica" {
			t.Fatalf("the replica's write on a voter: %v %q", err, got)
		}
	})

	// The serving certificate covers the client Service and the pod's
	// DNS names (--tls-san from the chart).
	for _, name := range []string{"trustplane." + namespace + ".svc", "trustplane." + namespace + ".svc.cluster.local", pods[0].name + "." + podDomain} {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", pods[0].vars["TRUSTPLANE_LISTEN"], &tls.Config{RootCAs: pool, ServerName: name})
		if err != nil {
			t.Errorf("TLS to %s as %s: %v", pods[0].name, name, err)
			continue
		}
		conn.Close()
	}
}

// podFor resolves the container's environment for pod i as the kubelet
// would, then maps the pod network and the volumes to local stand-ins.
func podFor(t *testing.T, ss *appsv1.StatefulSet, cm *corev1.ConfigMap, i int, ip, podDomain, caDir string) *localPod {
	t.Helper()
	c := ss.Spec.Template.Spec.Containers[0]
	p := &localPod{name: fmt.Sprintf("%s-%d", ss.Name, i), ip: ip, vars: map[string]string{}}
	dataVol := t.TempDir()
	p.log = filepath.Join(dataVol, "trustplane.log")

	// Volumes: each mount path maps to a local directory.
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		switch m.Name {
		case "data":
			mounts[m.MountPath] = dataVol
		case "ca":
			mounts[m.MountPath] = caDir
		default:
			t.Fatalf("volume %s has no local stand-in in this test", m.Name)
		}
	}
	mapPath := func(v string) string {
		for mp, local := range mounts {
			if v == mp {
				return local
			}
			if rest, ok := strings.CutPrefix(v, mp+"/"); ok {
				return filepath.Join(local, rest)
			}
		}
		return v
	}
	// The pod network: pods' DNS names resolve to their IPs, and a bind
	// to every interface inside the pod is a bind to its IP.
	mapNet := func(v string) string {
		for j, other := range podIPs {
			v = strings.ReplaceAll(v, fmt.Sprintf("%s-%d.%s:", voterSet, j, podDomain), other+":")
		}
		v = strings.ReplaceAll(v, p.name+"."+podDomain+":", ip+":") // a read replica's own name
		if rest, ok := strings.CutPrefix(v, "0.0.0.0:"); ok {
			v = ip + ":" + rest
		}
		return v
	}

	resolved := map[string]string{} // what $(VAR) sees: the values as the kubelet resolved them
	for _, e := range c.Env {
		var v string
		switch {
		case e.ValueFrom == nil:
			v = expansion.Expand(e.Value, expansion.MappingFuncFor(resolved))
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = p.name
			case "status.podIP":
				v = ip
			default:
				t.Fatalf("env %s: fieldRef %s has no stand-in in this test", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		case e.ValueFrom.ConfigMapKeyRef != nil:
			ref := e.ValueFrom.ConfigMapKeyRef
			val, ok := cm.Data[ref.Key]
			if ref.Name != cm.Name || !ok {
				t.Fatalf("env %s: ConfigMap %s key %s is not rendered", e.Name, ref.Name, ref.Key)
			}
			v = val
		default:
			t.Fatalf("env %s: %+v has no stand-in in this test", e.Name, e.ValueFrom)
		}
		resolved[e.Name] = v
		local := mapPath(mapNet(v))
		if strings.Contains(local, ".svc.cluster.local:") || strings.Contains(local, "$(") {
			t.Fatalf("env %s = %q: an address the test cannot reach, or an unexpanded variable", e.Name, local)
		}
		p.vars[e.Name] = local
		p.env = append(p.env, e.Name+"="+local)
	}
	for _, a := range c.Args {
		p.args = append(p.args, expansion.Expand(a, expansion.MappingFuncFor(resolved)))
	}
	return p
}

func (p *localPod) start(t *testing.T) {
	t.Helper()
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(trustplaneBin, p.args...)
	cmd.Env = p.env // the container's environment and nothing else
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", p.name, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(p.done) }()
}

// stop kills exactly the process start began, by its PID, and waits.
func (p *localPod) stop() {
	if p.cmd == nil {
		return
	}
	p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// waitReady polls url until it answers 200, failing at deadline or when
// the process exits.
func (p *localPod) waitReady(t *testing.T, url string, pool *x509.CertPool, deadline time.Time) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				if _, err := os.Stat(filepath.Join(p.vars["TRUSTPLANE_DATA_DIR"], "admin.kubeconfig")); err == nil {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s did not answer 200 in time (%v)", p.name, url, err)
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before it was ready", p.name)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// checkFree fails the test when addr is in use, naming it.
func checkFree(t *testing.T, proto corev1.Protocol, addr string) {
	t.Helper()
	if proto == corev1.ProtocolUDP {
		c, err := net.ListenPacket("udp", addr)
		if err != nil {
			t.Fatalf("udp %s is taken; the test needs it: %v", addr, err)
		}
		c.Close()
		return
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("tcp %s is taken; the test needs it: %v", addr, err)
	}
	l.Close()
}

// kubectl runs the real kubectl with kubeconfig and returns its trimmed
// combined output.
func kubectl(t *testing.T, kubeconfig string, args ...string) (string, error) {
	t.Helper()
	path, err := exec.LookPath("kubectl")
	if err != nil {
		t.Fatalf("kubectl is not on PATH: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append([]string{"--kubeconfig", kubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=", "HOME="+t.TempDir())
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// waitUntil polls cond every 200 ms until it holds; the timeout only
// bounds the wait.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}
