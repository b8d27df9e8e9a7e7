package storage

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/fsm"
	"github.com/trustplane/trustplane/watchcache"
)

// fakeBackend has applied index applied; WaitApplied for anything later
// waits until ctx ends. readIndexErr fails ReadIndex.
type fakeBackend struct {
	applied      uint64
	readIndexErr error
	readIndexes  int
}

func (b *fakeBackend) Propose(context.Context, *fsm.Command) (*fsm.Result, error) {
	return nil, errors.New("not in this test")
}
func (b *fakeBackend) ReadIndex(context.Context) (uint64, error) {
	b.readIndexes++
	return b.applied, b.readIndexErr
}
func (b *fakeBackend) WaitApplied(ctx context.Context, index uint64) error {
	if index <= b.applied {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}
func (b *fakeBackend) AppliedIndex() uint64                         { return b.applied }
func (b *fakeBackend) Get(fsm.Key, uint64) (*fsm.KV, uint64, error) { return nil, b.applied, nil }
func (b *fakeBackend) List(fsm.Prefix, fsm.ListOptions) (fsm.ListResult, error) {
	return fsm.ListResult{Revision: b.applied}, nil
}

func newTestStorage(applied uint64) (*Storage, *fakeBackend) {
	b := &fakeBackend{applied: applied}
	s, err := New(&Config{FreshWait: 10 * time.Millisecond}, b)
	if err != nil {
		panic(err) // no Feed: New cannot fail
	}
	return s, b
}

// wantStatus checks that err is a Status error with code and, if msg is
// set, exactly msg.
func wantStatus(t *testing.T, err error, code int32, msg string) {
	t.Helper()
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		t.Fatalf("error %v is not a Status, want %d %q", err, code, msg)
	}
	if got := st.Status(); got.Code != code || (msg != "" && got.Message != msg) {
		t.Fatalf("Status %d %q, want %d %q", got.Code, got.Message, code, msg)
	}
}

func TestParseResourceVersion(t *testing.T) {
	tests := []struct {
		name, rv string
		want     uint64
		code     int32
		msg      string
	}{
		{name: "unset is 0", rv: "", want: 0},
		{name: "0 is 0", rv: "0", want: 0},
		{name: "a positive number is itself", rv: "42", want: 42},
		{name: "leading zeros are tolerated, as by ParseUint", rv: "042", want: 42},
		{name: "the largest uint64", rv: "18446744073709551615", want: 18446744073709551615},
		{name: "not a number is 400 with kube's InvalidError wording", rv: "abc", code: http.StatusBadRequest,
			msg: `invalid resource version: resourceVersion: Invalid value: "abc": strconv.ParseUint: parsing "abc": invalid syntax`},
		{name: "a negative number is 400", rv: "-1", code: http.StatusBadRequest,
			msg: `invalid resource version: resourceVersion: Invalid value: "-1": strconv.ParseUint: parsing "-1": invalid syntax`},
		{name: "beyond uint64 is 400", rv: "18446744073709551616", code: http.StatusBadRequest,
			msg: `invalid resource version: resourceVersion: Invalid value: "18446744073709551616": strconv.ParseUint: parsing "18446744073709551616": value out of range`},
		{name: "a zero spelled otherwise is 400", rv: "00", code: http.StatusBadRequest, msg: "invalid resource version: 00"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseResourceVersion(tc.rv)
			if tc.code != 0 {
				wantStatus(t, err, tc.code, tc.msg)
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseResourceVersion(%q) = %d, %v; want %d", tc.rv, got, err, tc.want)
			}
		})
	}
}

func TestFresh(t *testing.T) {
	tests := []struct {
		name         string
		rv           string
		readIndexErr error
		code         int32
		msg          string
		readIndexes  int
	}{
		{name: "0 is served locally, no read index", rv: "0"},
		{name: "unset takes a read index", rv: "", readIndexes: 1},
		{name: "unset without a leader is 503", rv: "", readIndexErr: errors.New("no leader"), readIndexes: 1,
			code: http.StatusServiceUnavailable, msg: "the cluster cannot serve the request right now: no leader"},
		{name: "an applied revision is served at once", rv: "10"},
		{name: "a revision not applied in time is 504 Too large resource version", rv: "11",
			code: http.StatusGatewayTimeout, msg: "Timeout: Too large resource version: 11, current: 10"},
		{name: "a revision far beyond is 504 too", rv: "99999999",
			code: http.StatusGatewayTimeout, msg: "Timeout: Too large resource version: 99999999, current: 10"},
		{name: "not a number is 400", rv: "abc", code: http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, b := newTestStorage(10)
			b.readIndexErr = tc.readIndexErr
			err := s.Fresh(context.Background(), tc.rv)
			if b.readIndexes != tc.readIndexes {
				t.Errorf("%d read indexes, want %d", b.readIndexes, tc.readIndexes)
			}
			if tc.code == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantStatus(t, err, tc.code, tc.msg)
			st := err.(apierrors.APIStatus).Status()
			if tc.code >= 503 && (st.Details == nil || st.Details.RetryAfterSeconds != 1) {
				t.Errorf("Retry-After missing in %+v", st.Details)
			}
			if tc.code == http.StatusGatewayTimeout && (len(st.Details.Causes) != 1 ||
				st.Details.Causes[0] != (metav1.StatusCause{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"})) {
				t.Errorf("causes %+v, want one ResourceVersionTooLarge", st.Details.Causes)
			}
		})
	}
}

func TestApplied(t *testing.T) {
	s, b := newTestStorage(7)
	if got := s.Applied(); got != 7 {
		t.Fatalf("Applied() = %d, want 7", got)
	}
	b.applied = 9
	if got := s.Applied(); got != 9 {
		t.Fatalf("Applied() = %d after an apply, want 9", got)
	}
}

func TestContinueTokens(t *testing.T) {
	raw := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name, token string
		rev         uint64
		start       string
		msg         string // non-empty: 400 with this message
	}{
		{name: "a token round-trips", token: EncodeContinue(12, "k"), rev: 12, start: "k"},
		{name: "an inconsistent token continues at the latest revision", token: EncodeContinue(0, "k"), rev: 0, start: "k"},
		{name: "not base64 is 400", token: "%%%",
			msg: "invalid continue token: illegal base64 data at input byte 0"},
		{name: "padded base64 is 400", token: EncodeContinue(12, "k") + "==",
			msg: "invalid continue token: illegal base64 data at input byte 56"},
		{name: "base64 garbage is 400", token: raw("\xff"),
			msg: "invalid continue token: invalid character 'ÿ' looking for beginning of value"},
		{name: "deep nesting is 400", token: raw(strings.Repeat("[", 10000)),
			msg: "invalid continue token: unexpected end of JSON input"},
		{name: "a foreign version is 400", token: raw(`{"v":"meta.k8s.io/v2","rv":1}`),
			msg: "invalid continue token: unsupported version or revision"},
		{name: "revision 0 without latest is 400", token: raw(`{"v":"meta.k8s.io/v1","rv":0}`),
			msg: "invalid continue token: unsupported version or revision"},
		{name: "a fractional revision is 400", token: raw(`{"v":"meta.k8s.io/v1","rv":1.5}`),
			msg: "invalid continue token: json: cannot unmarshal number 1.5 into Go struct field continueToken.rv of type uint64"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rev, start, err := DecodeContinue(tc.token)
			if tc.msg != "" {
				wantStatus(t, err, http.StatusBadRequest, tc.msg)
				return
			}
			if err != nil || rev != tc.rev || start != tc.start {
				t.Fatalf("DecodeContinue = %d, %q, %v; want %d, %q", rev, start, err, tc.rev, tc.start)
			}
		})
	}
}

func TestListStart(t *testing.T) {
	tests := []struct {
		name  string
		opts  metainternalversion.ListOptions
		rev   uint64
		start string
		code  int32
		msg   string
	}{
		{name: "unset lists the latest revision", opts: metainternalversion.ListOptions{}},
		{name: "0 lists the latest revision", opts: metainternalversion.ListOptions{ResourceVersion: "0", Limit: 5}},
		{name: "N not older than lists the latest revision",
			opts: metainternalversion.ListOptions{ResourceVersion: "8", ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan}},
		{name: "N exact lists at N",
			opts: metainternalversion.ListOptions{ResourceVersion: "8", ResourceVersionMatch: metav1.ResourceVersionMatchExact}, rev: 8},
		{name: "N with a limit and no match lists at N",
			opts: metainternalversion.ListOptions{ResourceVersion: "8", Limit: 2}, rev: 8},
		{name: "a token resumes at its revision and key",
			opts: metainternalversion.ListOptions{Continue: EncodeContinue(9, "k")}, rev: 9, start: "k"},
		{name: "a token tolerates resourceVersion 0",
			opts: metainternalversion.ListOptions{Continue: EncodeContinue(9, "k"), ResourceVersion: "0"}, rev: 9, start: "k"},
		{name: "a token with another resourceVersion is 400",
			opts: metainternalversion.ListOptions{Continue: EncodeContinue(9, "k"), ResourceVersion: "9"},
			code: http.StatusBadRequest, msg: "specifying resource version is not allowed when using continue"},
		{name: "a token from a node further ahead is 504 after the wait",
			opts: metainternalversion.ListOptions{Continue: EncodeContinue(11, "k")},
			code: http.StatusGatewayTimeout, msg: "Timeout: Too large resource version: 11, current: 10"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestStorage(10)
			rev, start, err := s.ListStart(context.Background(), &tc.opts)
			if tc.code != 0 {
				wantStatus(t, err, tc.code, tc.msg)
				return
			}
			if err != nil || rev != tc.rev || start != tc.start {
				t.Fatalf("ListStart = %d, %q, %v; want %d, %q", rev, start, err, tc.rev, tc.start)
			}
		})
	}
}

func TestListErr(t *testing.T) {
	s, _ := newTestStorage(10)
	err := s.ListErr(fsm.ErrCompacted, 3, false, "")
	wantStatus(t, err, http.StatusGone, "The resourceVersion for the provided list is too old.")

	err = s.ListErr(fsm.ErrCompacted, 3, true, "k")
	wantStatus(t, err, http.StatusGone, inconsistentContinue)
	tok := err.(apierrors.APIStatus).Status().ListMeta.Continue
	if rev, start, derr := DecodeContinue(tok); derr != nil || rev != 0 || start != "k" {
		t.Fatalf("the 410's token resumes at %d after %q (%v), want the latest revision after k", rev, start, derr)
	}

	wantStatus(t, s.ListErr(fsm.ErrFutureRevision, 12, false, ""), http.StatusGatewayTimeout,
		"Timeout: Too large resource version: 12, current: 10")
	wantStatus(t, s.ListErr(errors.New("disk on fire"), 3, false, ""), http.StatusInternalServerError, "")
}

func TestWatchStart(t *testing.T) {
	yes := true
	tests := []struct {
		name    string
		opts    metainternalversion.ListOptions
		start   uint64
		initial bool
		code    int32
		msg     string
	}{
		{name: "unset starts at a read index with the state first", start: 10, initial: true},
		{name: "0 starts at the applied index with the state first",
			opts: metainternalversion.ListOptions{ResourceVersion: "0"}, initial: true},
		{name: "N streams the changes after N",
			opts: metainternalversion.ListOptions{ResourceVersion: "7"}, start: 7},
		{name: "N may be in the future (the watch waits for it)",
			opts: metainternalversion.ListOptions{ResourceVersion: "70"}, start: 70},
		{name: "not a number is 400 with the watch's wording",
			opts: metainternalversion.ListOptions{ResourceVersion: "abc"}, code: http.StatusBadRequest, msg: "invalid resource version: abc"},
		{name: "leading zeros are 400 for a watch",
			opts: metainternalversion.ListOptions{ResourceVersion: "07"}, code: http.StatusBadRequest, msg: "invalid resource version: 07"},
		{name: "a negative number is 400",
			opts: metainternalversion.ListOptions{ResourceVersion: "-1"}, code: http.StatusBadRequest, msg: "invalid resource version: -1"},
		{name: "sendInitialEvents waits for N, then the state",
			opts: metainternalversion.ListOptions{ResourceVersion: "9", SendInitialEvents: &yes}, initial: true},
		{name: "sendInitialEvents at a revision not applied in time is 504",
			opts: metainternalversion.ListOptions{ResourceVersion: "11", SendInitialEvents: &yes},
			code: http.StatusGatewayTimeout, msg: "Timeout: Too large resource version: 11, current: 10"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newTestStorage(10)
			start, initial, err := s.WatchStart(context.Background(), &tc.opts)
			if tc.code != 0 {
				wantStatus(t, err, tc.code, tc.msg)
				return
			}
			if err != nil || start != tc.start || initial != tc.initial {
				t.Fatalf("WatchStart = %d, %v, %v; want %d, %v", start, initial, err, tc.start, tc.initial)
			}
		})
	}
	wantStatus(t, WatchTooOld(&watchcache.TooOldError{Requested: 3, Oldest: 5}), http.StatusGone, "too old resource version: 3 (5)")
}
