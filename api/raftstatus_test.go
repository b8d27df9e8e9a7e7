package api

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/trustplane/trustplane/cluster"
)

// raftMembership is a Membership with the RaftReporter capability.
type raftMembership struct {
	fakeMembership
	st RaftStatus
}

func (r raftMembership) RaftStatus() RaftStatus { return r.st }

// raftStatusReq is a GET of raftPath by a client certificate with the
// given name and organisations (groups).
func raftStatusReq(name string, groups ...string) *http.Request {
	req := httptest.NewRequest(http.MethodGet, raftPath, nil)
	req.TLS = &tls.ConnectionState{VerifiedChains: [][]*x509.Certificate{{{Subject: pkix.Name{CommonName: name, Organization: groups}}}}}
	return req
}

// TestRaftStatusIsForSystemMastersOnly: a user outside system:masters
// gets 403 and no status; a master gets this node's status as JSON; a
// node whose Membership cannot report raft answers 503.
func TestRaftStatusIsForSystemMastersOnly(t *testing.T) {
	want := RaftStatus{
		Node: "n2", State: "Follower", Term: 7, Leader: "n1", LeaderChanges: 3, Elections: 1,
		CommitIndex: 42, AppliedIndex: 41, LastContact: ContactAge(1500 * time.Millisecond),
		Formats: []cluster.ClusterFormat{{Name: cluster.FormatRPC, Version: 1, Newest: 2, Behind: []string{"n3 reads up to 1"}}},
	}
	s := testServer(t)
	s.cfg.Membership = raftMembership{fakeMembership{in: true}, want}
	h := s.Handler()

	for _, groups := range [][]string{nil, {"system:authenticated"}, {"system:nodes"}} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, raftStatusReq("bob", groups...))
		if rec.Code != http.StatusForbidden {
			t.Fatalf("groups %v: code = %d, want 403: %s", groups, rec.Code, rec.Body)
		}
		if st := decodeStatus(t, rec); st.Code != http.StatusForbidden {
			t.Fatalf("groups %v: Status %+v, want a 403 Status", groups, st)
		}
	}

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, raftStatusReq("admin", "system:masters"))
	if rec.Code != http.StatusOK {
		t.Fatalf("system:masters: code = %d, want 200: %s", rec.Code, rec.Body)
	}
	var raw map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil {
		t.Fatalf("body is not JSON: %v: %s", err, rec.Body)
	}
	if raw["lastContact"] != "1.5s" || raw["leaderChanges"] != float64(3) || raw["state"] != "Follower" {
		t.Fatalf("body %s: want lastContact \"1.5s\", leaderChanges 3, state Follower", rec.Body)
	}
	var got RaftStatus
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded %+v, want %+v", got, want)
	}

	s = testServer(t)
	s.cfg.Membership = fakeMembership{in: true}
	rec = httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, raftStatusReq("admin", "system:masters"))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("without the capability: code = %d, want 503", rec.Code)
	}
}

// TestContactAgeJSON: never is "", and a duration survives the round trip.
func TestContactAgeJSON(t *testing.T) {
	for _, tc := range []struct {
		age  ContactAge
		json string
	}{
		{-1, `""`},
		{0, `"0s"`},
		{ContactAge(35 * time.Millisecond), `"35ms"`},
	} {
		b, err := json.Marshal(tc.age)
		if err != nil || string(b) != tc.json {
			t.Fatalf("Marshal(%d) = %s, %v; want %s", tc.age, b, err, tc.json)
		}
		var back ContactAge
		if err := json.Unmarshal(b, &back); err != nil || back != tc.age {
			t.Fatalf("Unmarshal(%s) = %d, %v; want %d", b, back, err, tc.age)
		}
	}
	var a ContactAge
	if err := json.Unmarshal([]byte(`"soon"`), &a); err == nil {
		t.Fatal("Unmarshal accepted a malformed duration")
	}
}
