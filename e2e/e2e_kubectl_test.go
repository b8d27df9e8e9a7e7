package e2e_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// header matches a kubectl table header: the column names separated by
// runs of at least three spaces, as kubectl's tabwriter pads them.
func header(cols ...string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^` + strings.Join(cols, ` {3,}`) + `$`)
}

// row matches a table row by its leading cells.
func row(cells ...string) *regexp.Regexp {
	for i := range cells {
		cells[i] = regexp.QuoteMeta(cells[i])
	}
	return regexp.MustCompile(`(?m)^` + strings.Join(cells, ` +`) + `( |$)`)
}

// TestKubectl runs the real kubectl against one node: the flow,
// then the everyday verbs, comparing output with kube-apiserver's.
func TestKubectl(t *testing.T) {
	n := startNode(t)
	n.scrub(t, "sa/x", "secret/s", "cm/c1", "pod/p1", "cm/from-file", "cm/bad", "pod/applied", "ns/team")
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	exact := func(t *testing.T, want string, args ...string) {
		t.Helper()
		if out := n.mustKubectl(args...); out != want {
			t.Fatalf("kubectl %s:\n%s\nwant:\n%s", strings.Join(args, " "), out, want)
		}
	}
	matches := func(t *testing.T, out string, res ...*regexp.Regexp) {
		t.Helper()
		for _, re := range res {
			if !re.MatchString(out) {
				t.Fatalf("output does not match %s:\n%s", re, out)
			}
		}
	}
	fails := func(t *testing.T, want string, args ...string) {
		t.Helper()
		out, err := n.kubectl(args...)
		if err == nil {
			t.Fatalf("kubectl %s succeeded:\n%s", strings.Join(args, " "), out)
		}
		if !strings.Contains(out, want) {
			t.Fatalf("kubectl %s:\n%s\nwant it to contain %q", strings.Join(args, " "), out, want)
		}
	}

	t.Run("issue flow", func(t *testing.T) {
		// The ServiceAccounts controller gives every namespace "default".
		waitFor(t, 20*time.Second, "a default ServiceAccount in every namespace", func() bool {
			out, _ := n.kubectl("get", "sa", "-A", "--no-headers")
			return strings.Count(out, "default ") >= 3
		})
		matches(t, n.mustKubectl("get", "sa", "-A"), header("NAMESPACE", "NAME", "SECRETS", "AGE"),
			row("default", "default", "0"), row("kube-public", "default", "0"), row("kube-system", "default", "0"))
		exact(t, "serviceaccount/x created", "create", "sa", "x")
		var sa struct {
			APIVersion, Kind string
			Metadata         struct {
				Name, Namespace, UID, ResourceVersion, CreationTimestamp string
			}
		}
		if err := yaml.Unmarshal([]byte(n.mustKubectl("get", "sa", "x", "-o", "yaml")), &sa); err != nil {
			t.Fatal(err)
		}
		if sa.APIVersion != "v1" || sa.Kind != "ServiceAccount" || sa.Metadata.Name != "x" || sa.Metadata.Namespace != "default" ||
			sa.Metadata.UID == "" || sa.Metadata.ResourceVersion == "" || sa.Metadata.CreationTimestamp == "" {
			t.Fatalf("get sa x -o yaml: %+v", sa)
		}
		matches(t, n.mustKubectl("get", "sa"), header("NAME", "SECRETS", "AGE"), row("x", "0"))
		matches(t, n.mustKubectl("get", "sa", "-A"), header("NAMESPACE", "NAME", "SECRETS", "AGE"), row("default", "x", "0"))
		exact(t, "secret/s created", "create", "secret", "generic", "s", "--from-literal=a=b")
		exact(t, "Yg==", "get", "secret", "s", "-o", "jsonpath={.data.a}")
		exact(t, `serviceaccount "x" deleted`, "delete", "sa", "x")
		fails(t, `Error from server (NotFound): serviceaccounts "x" not found`, "get", "sa", "x")
	})

	t.Run("get", func(t *testing.T) {
		n.mustKubectl("create", "cm", "c1", "--from-literal=k=v", "--from-literal=k2=v2")
		n.mustKubectl("run", "p1", "--image=nginx", "--restart=Never")
		out := n.mustKubectl("get", "pods,cm,secrets", "-A")
		matches(t, out,
			header("NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"), row("default", "pod/p1", "0/1", "Pending", "0"),
			header("NAMESPACE", "NAME", "DATA", "AGE"), row("default", "configmap/c1", "2"),
			header("NAMESPACE", "NAME", "TYPE", "DATA", "AGE"), row("default", "secret/s", "Opaque", "1"))
		out = n.mustKubectl("get", "ns")
		matches(t, out, header("NAME", "STATUS", "AGE"), row("default", "Active"), row("kube-public", "Active"), row("kube-system", "Active"))
		matches(t, n.mustKubectl("get", "pods", "-o", "wide"), header("NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE", "NOMINATED NODE", "READINESS GATES"))
		matches(t, n.mustKubectl("get", "svc"), header("NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT\\(S\\)", "AGE"), row("kubernetes", "ClusterIP", "10.96.0.1", "<none>", "443/TCP"))
		waitFor(t, 20*time.Second, "kube-root-ca.crt in default", func() bool {
			_, err := n.kubectl("get", "cm", "kube-root-ca.crt")
			return err == nil
		})
		exact(t, "c1 kube-root-ca.crt", "get", "cm", "-l", "!nothing", "-o", "jsonpath={.items[*].metadata.name}")
		exact(t, "pod/p1", "get", "pods", "--field-selector", "status.phase=Pending", "-o", "name")
		exact(t, "No resources found in default namespace.", "get", "pods", "--field-selector", "status.phase=Running")
		exact(t, "", "get", "pods", "-o", "name", "--chunk-size=1", "-l", "run!=p1")
		exact(t, "pod/p1", "get", "pods", "-o", "name", "--chunk-size=1")
		exact(t, `pod "p1" deleted`, "delete", "pod", "p1")
	})

	t.Run("files and edits", func(t *testing.T) {
		cm := write("cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-file\ndata:\n  k: v\n")
		// kubectl validates strictly by default: it reads /openapi/v3,
		// sees fieldValidation, and sends fieldValidation=Strict.
		exact(t, "configmap/from-file created", "create", "-f", cm)
		fails(t, `Error from server (AlreadyExists): error when creating "`+cm+`": configmaps "from-file" already exists`, "create", "-f", cm)
		bad := write("bad.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bad\ndatta:\n  k: v\n")
		fails(t, `Error from server (BadRequest): error when creating "`+bad+`": ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: unknown field "datta"`, "create", "-f", bad)
		exact(t, "configmap/from-file labeled", "label", "cm", "from-file", "tier=web")
		exact(t, "configmap/from-file annotated", "annotate", "cm", "from-file", "note=hello")
		exact(t, "configmap/from-file patched", "patch", "cm", "from-file", "-p", `{"data":{"k2":"v2"}}`)
		exact(t, "configmap/from-file patched (no change)", "patch", "cm", "from-file", "-p", `{"data":{"k2":"v2"}}`)
		exact(t, "configmap/from-file patched", "patch", "cm", "from-file", "--type=json", "-p", `[{"op":"remove","path":"/data/k2"}]`)
		exact(t, "configmap/from-file patched", "patch", "cm", "from-file", "--type=merge", "-p", `{"metadata":{"labels":{"tier":null}}}`)
		fails(t, `The request is invalid: the server rejected our request due to an error in our request`, "patch", "cm", "from-file", "--type=json", "-p", `[{"op":"test","path":"/data/k","value":"nope"}]`)
		exact(t, `{"k":"v"} hello`, "get", "cm", "from-file", "-o", `jsonpath={.data} {.metadata.annotations.note}`)
		exact(t, "", "get", "cm", "from-file", "-o", "jsonpath={.metadata.labels}")
		replaced := write("cm2.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: from-file\ndata:\n  k: replaced\n")
		exact(t, "configmap/from-file replaced", "replace", "-f", replaced)
		exact(t, `{"k":"replaced"}`, "get", "cm", "from-file", "-o", "jsonpath={.data}")
		exact(t, `configmap "from-file" deleted`, "delete", "-f", cm)
		fails(t, `Error from server (NotFound): error when deleting "`+cm+`": configmaps "from-file" not found`, "delete", "-f", cm)
		// Client-side apply: create, configure, unchanged.
		exact(t, "configmap/from-file created", "apply", "-f", cm)
		exact(t, "configmap/from-file configured", "apply", "-f", replaced)
		exact(t, "configmap/from-file unchanged", "apply", "-f", replaced)
		exact(t, `configmap "from-file" deleted`, "delete", "-f", replaced)
		// Apply of a pod: kubectl computes the strategic merge patch from
		// the OpenAPI v3 schemas (containers merge by name).
		pod := write("pod.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: applied\nspec:\n  containers:\n  - name: a\n    image: nginx:1\n  - name: b\n    image: busybox\n")
		exact(t, "pod/applied created", "apply", "-f", pod)
		pod2 := write("pod2.yaml", "apiVersion: v1\nkind: Pod\nmetadata:\n  name: applied\nspec:\n  containers:\n  - name: a\n    image: nginx:2\n  - name: b\n    image: busybox\n")
		exact(t, "pod/applied configured", "apply", "-f", pod2)
		exact(t, "nginx:2 busybox", "get", "pod", "applied", "-o", "jsonpath={.spec.containers[*].image}")
		exact(t, `pod "applied" deleted`, "delete", "-f", pod2)
	})

	t.Run("explain", func(t *testing.T) {
		out := n.mustKubectl("explain", "pods.spec.restartPolicy")
		matches(t, out, regexp.MustCompile(`(?m)^KIND:\s+Pod$`), regexp.MustCompile(`(?m)^FIELD: restartPolicy <string>$`), regexp.MustCompile(`(?m)^\s+OnFailure$`))
		matches(t, n.mustKubectl("explain", "sa"), regexp.MustCompile(`(?m)^KIND:\s+ServiceAccount$`), regexp.MustCompile(`(?m)^\s+secrets\s+<\[\]ObjectReference>$`))
	})

	t.Run("namespaces", func(t *testing.T) {
		exact(t, "namespace/team created", "create", "ns", "team")
		exact(t, "serviceaccount/robot created", "create", "sa", "robot", "-n", "team")
		fails(t, `error: failed to create serviceaccount: namespaces "nowhere" not found`, "create", "sa", "robot", "-n", "nowhere")
		// Content held by a finalizer keeps the namespace Terminating
		// while the namespace controller empties it.
		exact(t, "configmap/pin created", "create", "cm", "pin", "-n", "team")
		exact(t, "configmap/pin patched", "patch", "cm", "pin", "-n", "team", "--type=merge", "-p", `{"metadata":{"finalizers":["example.com/hold"]}}`)
		exact(t, `namespace "team" deleted`, "delete", "ns", "team", "--wait=false")
		matches(t, n.mustKubectl("get", "ns", "team"), row("team", "Terminating"))
		fails(t, `error: failed to create serviceaccount: serviceaccounts "robot2" is forbidden: unable to create new content in namespace team because it is being terminated`,
			"create", "sa", "robot2", "-n", "team")
		// Released, the content goes, and then the namespace.
		exact(t, "configmap/pin patched", "patch", "cm", "pin", "-n", "team", "--type=json", "-p", `[{"op":"remove","path":"/metadata/finalizers"}]`)
		exact(t, "namespace/team condition met", "wait", "--for=delete", "ns/team", "--timeout=90s")
	})

	t.Run("discovery and raw", func(t *testing.T) {
		out := n.mustKubectl("api-resources")
		matches(t, out, header("NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"),
			row("configmaps", "cm", "v1", "true", "ConfigMap"),
			row("namespaces", "ns", "v1", "false", "Namespace"),
			row("pods", "po", "v1", "true", "Pod"),
			row("podtemplates", "v1", "true", "PodTemplate"),
			row("secrets", "v1", "true", "Secret"),
			row("serviceaccounts", "sa", "v1", "true", "ServiceAccount"),
			row("services", "svc", "v1", "true", "Service"))
		matches(t, n.mustKubectl("api-resources", "-o", "wide"), row("namespaces", "ns", "v1", "false", "Namespace", "create,delete,get,list,patch,update,watch"))
		matches(t, n.mustKubectl("api-versions"), regexp.MustCompile(`(?m)^v1$`))
		out = n.mustKubectl("get", "--raw", "/readyz?verbose")
		if !strings.HasPrefix(out, "[+]ping ok\n") || !strings.HasSuffix(out, "readyz check passed") {
			t.Fatalf("get --raw /readyz?verbose:\n%s", out)
		}
		exact(t, "ok", "get", "--raw", "/livez")
		matches(t, n.mustKubectl("version"), regexp.MustCompile(`(?m)^Server Version: v1\.33\.`))
		matches(t, n.mustKubectl("cluster-info"), regexp.MustCompile(`Kubernetes control plane is running at https://`))
	})
}
