package e2e_test

import (
	"testing"
	"time"

	"k8s.io/apiserver/pkg/endpoints/discovery"
)

// TestE2EStorageVersionHash: discovery gives each resource kube's storage
// version hash, of the group, version and kind its objects are stored
// in: a built-in kind's, and a custom resource's in every served version
// (both hash the definition's storage version), as the upstream spec
// "Discovery Custom resource should have storage version hash" checks.
func TestE2EStorageVersionHash(t *testing.T) {
	n := startNode(t)
	dc := n.clientset().Discovery()
	write := manifests(t)
	n.mustKubectl("apply", "-f", write("hashes", crdFor("hash.e2e.trustplane.io", "hashes", twoVersions, "")))
	want := map[string]string{
		"v1/configmaps":                    discovery.StorageVersionHash("", "v1", "ConfigMap"),
		"hash.e2e.trustplane.io/v1/hashes": discovery.StorageVersionHash("hash.e2e.trustplane.io", "v1", "Xhashes"),
		"hash.e2e.trustplane.io/v2/hashes": discovery.StorageVersionHash("hash.e2e.trustplane.io", "v1", "Xhashes"),
	}
	waitFor(t, 30*time.Second, "the custom resource in discovery", func() bool {
		_, err := dc.ServerResourcesForGroupVersion("hash.e2e.trustplane.io/v2")
		return err == nil
	})
	checked := 0
	for _, gv := range []string{"v1", "hash.e2e.trustplane.io/v1", "hash.e2e.trustplane.io/v2"} {
		list, err := dc.ServerResourcesForGroupVersion(gv)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range list.APIResources {
			if w, ok := want[gv+"/"+r.Name]; ok {
				checked++
				if r.StorageVersionHash != w {
					t.Errorf("%s/%s: storageVersionHash %q, want %q", gv, r.Name, r.StorageVersionHash, w)
				}
			}
		}
	}
	if checked != len(want) {
		t.Fatalf("%d of %d resources found in discovery", checked, len(want))
	}
}
