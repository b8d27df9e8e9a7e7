package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// fakeMembership is a Membership with the ConfigurationMember capability.
type fakeMembership struct{ in bool }

func (f fakeMembership) Members(context.Context) ([]Member, error)  { return nil, nil }
func (f fakeMembership) RemoveMember(context.Context, string) error { return nil }
func (f fakeMembership) InConfiguration() bool                      { return f.in }

func TestRefuseLocalRead(t *testing.T) {
	tests := []struct {
		name   string
		in     bool
		verb   string
		query  string
		refuse bool
	}{
		{"a member serves resourceVersion=0 lists", true, "list", "?resourceVersion=0", false},
		{"a member serves watches", true, "watch", "?watch=true", false},
		{"a non-member refuses resourceVersion=0 lists", false, "list", "?resourceVersion=0", true},
		{"a non-member refuses resourceVersion=0 gets", false, "get", "?resourceVersion=0", true},
		{"a non-member refuses watches at any resourceVersion", false, "watch", "?watch=true&resourceVersion=42", true},
		{"a non-member refuses watches given as list with watch=1", false, "list", "?watch=1", true},
		{"a non-member still answers consistent reads (they need the leader's read index)", false, "list", "", false},
		{"a non-member still answers reads at resourceVersion N (they wait for N)", false, "get", "?resourceVersion=7", false},
		{"writes are not local reads", false, "create", "?resourceVersion=0", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := testServer(t)
			s.cfg.Membership = fakeMembership{in: tc.in}
			req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/serviceaccounts"+tc.query, nil)
			err := s.refuseLocalRead(req, tc.verb)
			if (err != nil) != tc.refuse {
				t.Fatalf("refuseLocalRead = %v, want refused=%v", err, tc.refuse)
			}
			if err == nil {
				return
			}
			if !apierrors.IsServiceUnavailable(err) {
				t.Fatalf("refusal is %v, want 503 ServiceUnavailable", err)
			}
			if d, ok := apierrors.SuggestsClientDelay(err); !ok || d < 1 {
				t.Fatalf("refusal carries no Retry-After: %v", err)
			}
		})
	}
}

// Without the capability (a single node, or a Membership that cannot
// tell) nothing is refused.
func TestRefuseLocalReadWithoutCapability(t *testing.T) {
	s := testServer(t)
	req := httptest.NewRequest(http.MethodGet, "/api/v1/serviceaccounts?resourceVersion=0", nil)
	if err := s.refuseLocalRead(req, "list"); err != nil {
		t.Fatalf("refused without a membership: %v", err)
	}
}

// staleMembership is a member of the configuration that has, or has not,
// heard from a leader recently.
type staleMembership struct {
	fakeMembership
	fresh bool
}

func (s staleMembership) LeaderContactWithin(time.Duration) bool { return s.fresh }

// TestBoundedStaleness: a node that has not heard from a leader within
// MaxStaleRead answers resourceVersion=0 reads as linearizable ones (the
// query loses its resourceVersion) and refuses watches; a fresh node, or
// a bound of 0, changes nothing.
func TestBoundedStaleness(t *testing.T) {
	tests := []struct {
		name      string
		fresh     bool
		bound     time.Duration
		verb      string
		query     string
		refuse    bool
		wantQuery string
	}{
		{"a fresh node serves resourceVersion=0 locally", true, 5 * time.Second, "list", "resourceVersion=0", false, "resourceVersion=0"},
		{"a stale node reads resourceVersion=0 linearizably", false, 5 * time.Second, "list", "resourceVersion=0&resourceVersionMatch=NotOlderThan&limit=5", false, "limit=5"},
		{"a stale node reads a resourceVersion=0 get linearizably", false, 5 * time.Second, "get", "resourceVersion=0", false, ""},
		{"a stale node refuses watches", false, 5 * time.Second, "watch", "watch=true&resourceVersion=9", true, ""},
		{"a stale node leaves reads at resourceVersion N alone", false, 5 * time.Second, "get", "resourceVersion=7", false, "resourceVersion=7"},
		{"no bound: a stale node serves locally", false, 0, "list", "resourceVersion=0", false, "resourceVersion=0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := testServer(t)
			s.cfg.Membership = staleMembership{fakeMembership{in: true}, tc.fresh}
			s.cfg.MaxStaleRead = tc.bound
			req := httptest.NewRequest(http.MethodGet, "/api/v1/namespaces/default/serviceaccounts?"+tc.query, nil)
			err := s.refuseLocalRead(req, tc.verb)
			if (err != nil) != tc.refuse {
				t.Fatalf("refuseLocalRead = %v, want refused=%v", err, tc.refuse)
			}
			if err != nil {
				if !apierrors.IsServiceUnavailable(err) {
					t.Fatalf("refusal is %v, want 503", err)
				}
				return
			}
			if req.URL.RawQuery != tc.wantQuery {
				t.Fatalf("query = %q, want %q", req.URL.RawQuery, tc.wantQuery)
			}
		})
	}
}
