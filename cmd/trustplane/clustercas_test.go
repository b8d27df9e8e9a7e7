package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trustplane/trustplane/certs"
)

// The cluster id is fixed at a node's first start and survives a rotation
// of the cluster CA it was derived from.
func TestClusterIDAtStart(t *testing.T) {
	first, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	next, err := certs.NewClusterCA()
	if err != nil {
		t.Fatal(err)
	}
	write := func(dir, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, clusterIDFile), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name            string
		dataID, caDirID string
		ca              *certs.CA
		want, wantErr   string
	}{
		{name: "a first start takes the CA's id", ca: first, want: first.ID()},
		{name: "a restart keeps its id when the CA directory holds the next CA", dataID: first.ID() + "\n", ca: next, want: first.ID()},
		{name: "a node joining after a rotation takes the CA directory's id", caDirID: first.ID(), ca: next, want: first.ID()},
		{name: "its own id wins over the CA directory's", dataID: first.ID(), caDirID: next.ID(), ca: next, want: first.ID()},
		{name: "garbage is refused", dataID: "not-an-id", ca: first, wantErr: "not a cluster id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir, caDir := t.TempDir(), t.TempDir()
			if tc.dataID != "" {
				write(dataDir, tc.dataID)
			}
			if tc.caDirID != "" {
				write(caDir, tc.caDirID)
			}
			got, err := clusterIDAtStart(dataDir, caDir, tc.ca)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("id %q %v, want %q", got, err, tc.want)
			}
			if b, _ := os.ReadFile(filepath.Join(dataDir, clusterIDFile)); strings.TrimSpace(string(b)) != tc.want {
				t.Fatalf("the data directory keeps %q", b)
			}
		})
	}
}
