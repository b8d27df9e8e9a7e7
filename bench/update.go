package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var updateWorkload = &workload{
	name: "update",
	detail: func(c Config) string {
		return fmt.Sprintf("update (PUT) of one ConfigMap per client at its last resourceVersion, changing one value (%s)", encoding(c))
	},
	prepare: func(ctx context.Context, e *env) (load, error) {
		op, err := updateOp(ctx, e)
		return closedLoop{e, op}, err
	},
}

var patchWorkload = &workload{
	name: "patch",
	detail: func(c Config) string {
		return fmt.Sprintf("JSON patch of one ConfigMap per client, replacing one value (%s)", encoding(c))
	},
	prepare: func(ctx context.Context, e *env) (load, error) {
		op, err := patchOp(ctx, e)
		return closedLoop{e, op}, err
	},
}

// updateOp updates a ConfigMap of the client's own per operation, with
// the object its last write returned: a read-modify-write without the
// read, and without conflicts, since no other client writes it. The first
// operation of each client creates it.
func updateOp(ctx context.Context, e *env) (opFunc, error) {
	if err := e.ensureNamespace(ctx, ""); err != nil {
		return nil, err
	}
	ns := e.ns("")
	var mu sync.Mutex
	last := map[int]*corev1.ConfigMap{}
	return func(ctx context.Context, client, seq int) error {
		mu.Lock()
		cur := last[client]
		mu.Unlock()
		cms := e.client(client).CoreV1().ConfigMaps(ns)
		var (
			out *corev1.ConfigMap
			err error
		)
		if cur == nil {
			out, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("u-%d", client)}, Data: map[string]string{"static": "v", "n": "0"}}, metav1.CreateOptions{})
		} else {
			next := cur.DeepCopy()
			next.Data["n"] = strconv.Itoa(seq)
			out, err = cms.Update(ctx, next, metav1.UpdateOptions{})
		}
		if err != nil {
			return err
		}
		mu.Lock()
		last[client] = out
		mu.Unlock()
		return nil
	}, nil
}

// patchOp JSON-patches a ConfigMap of the client's own per operation; the
// first operation of each client creates it.
func patchOp(ctx context.Context, e *env) (opFunc, error) {
	if err := e.ensureNamespace(ctx, ""); err != nil {
		return nil, err
	}
	ns := e.ns("")
	var mu sync.Mutex
	made := map[int]bool{}
	return func(ctx context.Context, client, seq int) error {
		name := fmt.Sprintf("p-%d", client)
		cms := e.client(client).CoreV1().ConfigMaps(ns)
		mu.Lock()
		exists := made[client]
		mu.Unlock()
		if !exists {
			_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"static": "v", "n": "0"}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
			mu.Lock()
			made[client] = true
			mu.Unlock()
			return nil
		}
		patch := fmt.Sprintf(`[{"op":"replace","path":"/data/n","value":%q}]`, strconv.Itoa(seq))
		_, err := cms.Patch(ctx, name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}, nil
}
