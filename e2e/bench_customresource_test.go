package e2e_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// benchCRD is the custom resource BenchmarkCustomResourceCreates creates:
// a spec of four fields, three of them under a validation rule.
const benchCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: benchobjects.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: benchobjects, singular: benchobject, kind: BenchObject}
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
              replicas: {type: integer}
              image: {type: string, maxLength: 253}
              ports:
                type: array
                maxItems: 16
                items: {type: integer}
              mode: {type: string}
            x-kubernetes-validations:
            - rule: "self.replicas >= 0 && self.replicas <= 100"
              message: "replicas must be between 0 and 100"
            - rule: "self.image.startsWith('registry.example.com/')"
              message: "images come from registry.example.com"
            - rule: "self.ports.all(p, p > 0 && p < 65536)"
              message: "ports are 1 to 65535"
`

// dynamicClients are benchClients dynamic clients of n, each with its own
// connection.
func dynamicClients(b *testing.B, n *node) []*dynamic.DynamicClient {
	b.Helper()
	out := make([]*dynamic.DynamicClient, benchClients)
	for i := range out {
		cfg := n.restConfig()
		cfg.QPS, cfg.Burst = -1, 0
		tlsCfg, err := rest.TLSConfigFor(cfg)
		if err != nil {
			b.Fatal(err)
		}
		tr := &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 4}
		dc, err := dynamic.NewForConfigAndClient(cfg, &http.Client{Transport: tr, Timeout: 30 * time.Second})
		if err != nil {
			b.Fatal(err)
		}
		out[i] = dc
	}
	return out
}

// BenchmarkCustomResourceCreates measures creates per second on one node
// (32 dynamic clients, JSON) of ConfigMaps and of custom objects whose
// definition checks three validation rules, one after the other, with the
// same client code for both. Issue 17's target: custom objects within 25%
// of ConfigMaps.
func BenchmarkCustomResourceCreates(b *testing.B) {
	n := startNode(b)
	n.scrub(b, "crd/benchobjects.example.com")
	p := filepath.Join(b.TempDir(), "crd.yaml")
	if err := os.WriteFile(p, []byte(benchCRD), 0o600); err != nil {
		b.Fatal(err)
	}
	n.mustKubectl("apply", "-f", p)
	n.mustKubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/benchobjects.example.com")
	dcs := dynamicClients(b, n)
	ctx := context.Background()
	kinds := []struct {
		name string
		gvr  schema.GroupVersionResource
		obj  func(name string) *unstructured.Unstructured
	}{
		{"configmaps", schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, func(name string) *unstructured.Unstructured {
			return &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "ConfigMap",
				"metadata": map[string]interface{}{"name": name},
				"data":     map[string]interface{}{"replicas": "3", "image": "registry.example.com/app:1.0", "ports": "80,443", "mode": "fast"}}}
		}},
		{"custom-3-rules", schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "benchobjects"}, func(name string) *unstructured.Unstructured {
			return &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "example.com/v1", "kind": "BenchObject",
				"metadata": map[string]interface{}{"name": name},
				"spec": map[string]interface{}{"replicas": int64(3), "image": "registry.example.com/app:1.0",
					"ports": []interface{}{int64(80), int64(443)}, "mode": "fast"}}}
		}},
	}
	waitFor(b, 30*time.Second, "benchobjects to be served", func() bool {
		_, err := dcs[0].Resource(kinds[1].gvr).Namespace("default").List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil
	})
	var runs atomic.Int64
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			prefix := fmt.Sprintf("bench-%d", runs.Add(1))
			profileDuring(b, n, func() {
				runParallel(b, len(dcs), func(c int, i int64) error {
					name := fmt.Sprintf("%s-%d", prefix, i)
					if _, err := dcs[c].Resource(k.gvr).Namespace("default").Create(ctx, k.obj(name), metav1.CreateOptions{}); err != nil {
						return fmt.Errorf("create %s %s: %w", k.name, name, err)
					}
					return nil
				})
			})
		})
	}
}
