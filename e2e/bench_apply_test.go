package e2e_test

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
)

// BenchmarkServerSideApply measures server-side applies per second (ops/s)
// and their latency on one object set: 16 ConfigMaps, each shared by 16
// managers. Each manager is one client that applies its own field set
// (four keys under its name, with a new value every time, so that every
// apply writes) to the ConfigMaps in turn, so every object is merged by all
// managers and the applies on one object race in the store's optimistic
// loop.
func BenchmarkServerSideApply(b *testing.B) {
	const managers, objects, keys = 16, 16, 4
	n := startNode(b, "--controllers=false")
	cs := clients(b, n, "application/json")[:managers]
	ctx := context.Background()
	for o := 0; o < objects; o++ {
		cm := corev1ac.ConfigMap(fmt.Sprintf("set-%d", o), "default").WithLabels(map[string]string{"set": "bench"})
		if _, err := cs[0].CoreV1().ConfigMaps("default").Apply(ctx, cm, metav1.ApplyOptions{FieldManager: "setup"}); err != nil {
			b.Fatal(err)
		}
	}
	profileDuring(b, n, func() {
		runParallel(b, managers, func(c int, i int64) error {
			data := map[string]string{}
			for k := 0; k < keys; k++ {
				data[fmt.Sprintf("m%d-k%d", c, k)] = fmt.Sprint(i)
			}
			cm := corev1ac.ConfigMap(fmt.Sprintf("set-%d", i%objects), "default").WithData(data)
			_, err := cs[c].CoreV1().ConfigMaps("default").Apply(ctx, cm, metav1.ApplyOptions{FieldManager: fmt.Sprintf("manager-%d", c)})
			return err
		})
	})
	// The applies were merges: every entry is an Apply of one manager.
	cm, err := cs[0].CoreV1().ConfigMaps("default").Get(ctx, "set-0", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, e := range cm.ManagedFields {
		if e.Operation != metav1.ManagedFieldsOperationApply {
			b.Fatalf("set-0 has a %s entry of %s", e.Operation, e.Manager)
		}
	}
	if len(cm.ManagedFields) > managers+1 {
		b.Fatalf("set-0 has %d managers", len(cm.ManagedFields))
	}
}
