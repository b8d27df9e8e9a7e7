package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestExpiredResourceVersions: with short history (compaction after 1 s, a
// 1 s watch window) a resourceVersion that has aged out gets kube-apiserver's
// 410 answers: an ERROR event for a watch, Expired for an exact list, and for
// a continue token an "inconsistent" 410 whose Status carries a replacement
// token that continues the list.
func TestExpiredResourceVersions(t *testing.T) {
	n := startNode(t, "--compact-retention", "1s", "--compact-interval", "200ms", "--watch-cache-window", "1s")
	cs := n.clientset()
	ctx := context.Background()
	for i := 0; i < 6; i++ {
		if _, err := createSA(cs, fmt.Sprintf("old-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	first, err := cs.CoreV1().ServiceAccounts("default").List(ctx, metav1.ListOptions{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	oldRV, token := first.ResourceVersion, first.Continue
	if token == "" {
		t.Fatal("no continue token on the first page")
	}

	// Keep writing until the exact list at oldRV is compacted away
	// (bounded), so the window and the history both move past it.
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		if _, err := createSA(cs, fmt.Sprintf("new-%d", i)); err != nil {
			t.Fatal(err)
		}
		_, err := cs.CoreV1().ServiceAccounts("default").List(ctx, metav1.ListOptions{ResourceVersion: oldRV, ResourceVersionMatch: metav1.ResourceVersionMatchExact})
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("history at the old resourceVersion was never compacted")
		}
		time.Sleep(100 * time.Millisecond)
	}

	t.Run("an exact list at a compacted resourceVersion is 410 Expired", func(t *testing.T) {
		st := rawStatus(t, n, "/api/v1/namespaces/default/serviceaccounts?resourceVersionMatch=Exact&resourceVersion="+oldRV)
		if st.Code != 410 || st.Reason != metav1.StatusReasonExpired || st.Message != "The resourceVersion for the provided list is too old." {
			t.Fatalf("status %+v", st)
		}
	})

	t.Run("an expired continue token is 410 with a replacement token", func(t *testing.T) {
		st := rawStatus(t, n, "/api/v1/namespaces/default/serviceaccounts?limit=2&continue="+token)
		if st.Code != 410 || st.Reason != metav1.StatusReasonExpired || !strings.Contains(st.Message, "inconsistent list") || st.Continue == "" {
			t.Fatalf("status %+v", st)
		}
		rest, err := cs.CoreV1().ServiceAccounts("default").List(ctx, metav1.ListOptions{Limit: 500, Continue: st.Continue})
		if err != nil {
			t.Fatalf("continuing with the replacement token: %v", err)
		}
		for _, sa := range rest.Items {
			for _, seen := range first.Items {
				if sa.Name == seen.Name {
					t.Fatalf("the replacement token repeated %s from the first page", sa.Name)
				}
			}
		}
	})

	t.Run("a watch from an aged-out resourceVersion gets an ERROR event with 410", func(t *testing.T) {
		resp, err := n.httpClient().Get(n.url() + "/api/v1/namespaces/default/serviceaccounts?watch=true&resourceVersion=" + oldRV)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("watch answered %s, want 200 with an ERROR event", resp.Status)
		}
		var ev struct {
			Type   string
			Object metav1.Status
		}
		if err := json.NewDecoder(resp.Body).Decode(&ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type != "ERROR" || ev.Object.Code != 410 || !strings.HasPrefix(ev.Object.Message, "too old resource version: "+oldRV) {
			t.Fatalf("first event %s %+v, want ERROR 410 too old resource version", ev.Type, ev.Object)
		}
	})
}

// rawStatus GETs path with the admin client and decodes the Status body.
func rawStatus(t *testing.T, n *node, path string) metav1.Status {
	t.Helper()
	resp, err := n.httpClient().Get(n.url() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st metav1.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("%s: body is not a Status: %v", path, err)
	}
	if st.Kind != "Status" || st.Code != int32(resp.StatusCode) {
		t.Fatalf("%s: %s with body %+v", path, resp.Status, st)
	}
	return st
}
