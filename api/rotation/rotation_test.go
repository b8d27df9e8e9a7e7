package rotation

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fakeRoot records the steps it is asked and answers as told.
type fakeRoot struct {
	took []string
	err  error
}

func (f *fakeRoot) answer(step string, o Options) (*Status, error) {
	f.took = append(f.took, fmt.Sprintf("%s force=%v", step, o.Force))
	if f.err != nil {
		return nil, f.err
	}
	return &Status{Root: "fake", Done: step}, nil
}

func (f *fakeRoot) Status(context.Context) (*Status, error) { return f.answer("status", Options{}) }
func (f *fakeRoot) Start(_ context.Context, o Options) (*Status, error) {
	return f.answer("start", o)
}
func (f *fakeRoot) Promote(_ context.Context, o Options) (*Status, error) {
	return f.answer("promote", o)
}
func (f *fakeRoot) Finish(_ context.Context, o Options) (*Status, error) {
	return f.answer("finish", o)
}
func (f *fakeRoot) Abort(_ context.Context, o Options) (*Status, error) {
	return f.answer("abort", o)
}

func TestHandlers(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		err        error
		code       int
		took       string
		// recorded is what the Recorder is told: root, step, done, error.
		recorded string
	}{
		{"status", "/debug/trustplane/rotate/fake/status", nil, http.StatusOK, "status force=false", ""},
		{"a forced finish", "/debug/trustplane/rotate/fake/finish?force=true", nil, http.StatusOK, "finish force=true", "fake finish finish <nil>"},
		{"a step the cluster is not ready for", "/debug/trustplane/rotate/fake/promote", fmt.Errorf("%w: n2 lags", ErrNotReady), http.StatusConflict, "promote force=false", "fake promote  rotation: not ready for this step: n2 lags"},
		{"nothing to act on", "/debug/trustplane/rotate/fake/abort", fmt.Errorf("%w: nothing", ErrNoRotation), http.StatusConflict, "abort force=false", "fake abort  rotation: no rotation in progress for this step: nothing"},
		{"another failure", "/debug/trustplane/rotate/fake/start", fmt.Errorf("no quorum"), http.StatusServiceUnavailable, "start force=false", "fake start  no quorum"},
		{"a force that is not a boolean", "/debug/trustplane/rotate/fake/finish?force=maybe", nil, http.StatusBadRequest, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := &fakeRoot{err: tc.err}
			steps := &stepLog{}
			hs := Handlers(map[string]Root{"fake": root}, steps)
			if len(hs) != len(Steps) {
				t.Fatalf("%d handlers, want one per step", len(hs))
			}
			path, _, _ := strings.Cut(tc.path, "?")
			h := hs[path]
			if h == nil {
				t.Fatalf("no handler for %s", path)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, tc.path, nil))
			if rec.Code != tc.code {
				t.Fatalf("code %d (%s), want %d", rec.Code, rec.Body, tc.code)
			}
			if got := strings.Join(root.took, ","); got != tc.took {
				t.Fatalf("steps taken %q, want %q", got, tc.took)
			}
			if got := strings.Join(steps.told, ","); got != tc.recorded {
				t.Fatalf("recorded %q, want %q", got, tc.recorded)
			}
			if tc.err != nil && !strings.Contains(rec.Body.String(), tc.err.Error()) {
				t.Fatalf("the refusal does not say why: %s", rec.Body)
			}
			if tc.code == http.StatusOK {
				var st Status
				if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || st.Root != "fake" {
					t.Fatalf("answer %s: %v", rec.Body, err)
				}
			}
		})
	}
}

// stepLog is a Recorder that keeps what it is told.
type stepLog struct{ told []string }

func (l *stepLog) Step(root string, step Step, st *Status, err error) {
	done := ""
	if st != nil {
		done = st.Done
	}
	l.told = append(l.told, fmt.Sprintf("%s %s %s %v", root, step, done, err))
}

func TestCollector(t *testing.T) {
	c := Collector(map[string]Counter{"signing-key": func() (map[Phase]int, error) {
		return map[Phase]int{Active: 1, Retiring: 1}, nil
	}})
	want := `
# HELP trustplane_trust_root_keys Keys of each trust root by phase (pending, active, retiring), as this node has applied them.
# TYPE trustplane_trust_root_keys gauge
trustplane_trust_root_keys{phase="active",root="signing-key"} 1
trustplane_trust_root_keys{phase="pending",root="signing-key"} 0
trustplane_trust_root_keys{phase="retiring",root="signing-key"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
}

// A start may bring the operator's key, as JSON; a body that is not is
// refused without being quoted.
func TestHandlerKeyBody(t *testing.T) {
	var got []byte
	root := &keyRoot{got: &got}
	h := Handlers(map[string]Root{"k": root}, nil)[Path("k", StepStart)]
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path("k", StepStart), strings.NewReader(`{"key":"c2VjcmV0LWtleQ=="}`)))
	if rec.Code != http.StatusOK || string(got) != "secret-key" || strings.Contains(rec.Body.String(), "secret") {
		t.Fatalf("start with a key: %d %s, key %q", rec.Code, rec.Body, got)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, Path("k", StepStart), strings.NewReader(`secret-bytes`)))
	if rec.Code != http.StatusBadRequest || strings.Contains(rec.Body.String(), "secret") {
		t.Fatalf("a body that is not JSON: %d %s", rec.Code, rec.Body)
	}
}

type keyRoot struct {
	fakeRoot
	got *[]byte
}

func (k *keyRoot) Start(_ context.Context, o Options) (*Status, error) {
	*k.got = o.Key
	return &Status{Root: "k"}, nil
}
