package api

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/trustplane/trustplane"
	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/fsm/backup"
)

// snapshotMembership is a Membership with the SnapshotSource capability,
// over a real fsm.
type snapshotMembership struct {
	fakeMembership
	f   *fsm.FSM
	err error
}

func (m snapshotMembership) Snapshot(context.Context) (*fsm.Export, backup.Header, error) {
	if m.err != nil {
		return nil, backup.Header{}, m.err
	}
	exp := m.f.Export()
	return exp, backup.Header{Index: exp.Index(), Term: 3, Node: "n2"}, nil
}

func snapshotReq(query string, groups ...string) *http.Request {
	req := httptest.NewRequest(http.MethodGet, snapshotPath+query, nil)
	req.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: "someone", Organization: groups}}}}}
	return req
}

// TestSnapshotEndpoint: only system:masters gets a snapshot, and it is a
// verified backup file of the node's state; query parameters are refused
// with 400, a node that cannot confirm a read index answers 503 with
// Retry-After, and one without the capability 503.
func TestSnapshotEndpoint(t *testing.T) {
	f := fsm.New()
	for i, name := range []string{"a", "b"} {
		cmd := &fsm.Command{Op: fsm.OpPut, Key: fsm.Key{Resource: "configmaps", Namespace: "default", Name: name}, Value: []byte("v"), UID: name}
		f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: cmd.Encode()})
	}
	s := testServer(t)
	s.cfg.Membership = snapshotMembership{fakeMembership: fakeMembership{in: true}, f: f}
	h := s.Handler()

	for _, groups := range [][]string{nil, {"system:authenticated"}, {"system:nodes"}} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, snapshotReq("", groups...))
		if rec.Code != http.StatusForbidden || bytes.Contains(rec.Body.Bytes(), []byte("TPBACKUP")) {
			t.Fatalf("groups %v: code %d, want 403 without a snapshot: %q", groups, rec.Code, rec.Body)
		}
		if st := decodeStatus(t, rec); st.Code != http.StatusForbidden {
			t.Fatalf("groups %v: Status %+v, want a 403 Status", groups, st)
		}
	}

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, snapshotReq("", "system:masters"))
	if rec.Code != http.StatusOK {
		t.Fatalf("system:masters: code %d: %s", rec.Code, rec.Body)
	}
	file, err := backup.Read(bytes.NewReader(rec.Body.Bytes()), int64(rec.Body.Len()))
	if err != nil {
		t.Fatalf("the body is no valid backup: %v", err)
	}
	if hd := file.Header; hd.Index != 2 || hd.Term != 3 || hd.Node != "n2" || hd.ServerVersion != trustplane.Version() || hd.Created.IsZero() {
		t.Fatalf("header %+v", hd)
	}
	exp, err := file.Load()
	if err != nil {
		t.Fatal(err)
	}
	if s := backup.Summarize(exp); s.Objects["configmaps"] != 2 {
		t.Fatalf("snapshot holds %v, want 2 configmaps", s.Objects)
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, snapshotReq("?timeout=5s", "system:masters"))
	if rec.Code != http.StatusBadRequest || decodeStatus(t, rec).Code != http.StatusBadRequest {
		t.Fatalf("with a query: code %d, want a 400 Status: %s", rec.Code, rec.Body)
	}

	s = testServer(t)
	s.cfg.Membership = snapshotMembership{fakeMembership: fakeMembership{in: true}, err: errors.New("cluster: no known leader")}
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, snapshotReq("", "system:masters"))
	if rec.Code != http.StatusServiceUnavailable || rec.Header().Get("Retry-After") == "" || decodeStatus(t, rec).Code != http.StatusServiceUnavailable {
		t.Fatalf("without a read index: code %d, Retry-After %q, want a 503 Status with Retry-After: %s", rec.Code, rec.Header().Get("Retry-After"), rec.Body)
	}

	s = testServer(t)
	s.cfg.Membership = fakeMembership{in: true}
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, snapshotReq("", "system:masters"))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("without the capability: code %d, want 503", rec.Code)
	}
}
