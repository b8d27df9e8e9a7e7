//go:build failpoints

package failpoint

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    State
		badLine int // number of bad lines expected
	}{
		{name: "empty file is all off", in: "", want: State{}},
		{name: "comments and blank lines are ignored", in: "# off\n\n   \n", want: State{}},
		{name: "every key is read", in: "fsync-delay=300ms\ndisk-full=true\ndisk-full-stable=1\n",
			want: State{FsyncDelay: 300 * time.Millisecond, DiskFull: true, DiskFullStable: true}},
		{name: "spaces around key and value are trimmed", in: "  fsync-delay = 2s \n disk-full= true", want: State{FsyncDelay: 2 * time.Second, DiskFull: true}},
		{name: "the last line for a key wins", in: "disk-full=true\ndisk-full=false\n", want: State{}},
		{name: "a line without = is ignored, others apply", in: "disk-full\nfsync-delay=1ms", want: State{FsyncDelay: time.Millisecond}, badLine: 1},
		{name: "an unknown key is ignored", in: "fsync-dealy=1s\ndisk-full=true", want: State{DiskFull: true}, badLine: 1},
		{name: "a bad duration is ignored", in: "fsync-delay=soon", badLine: 1},
		{name: "a negative duration is ignored", in: "fsync-delay=-1s", badLine: 1},
		{name: "a duration above the bound is ignored", in: "fsync-delay=2m", badLine: 1},
		{name: "a bad bool is ignored", in: "disk-full=yes please", badLine: 1},
		{name: "marshal round-trips", in: string(State{FsyncDelay: 42 * time.Millisecond, DiskFullStable: true}.Marshal()),
			want: State{FsyncDelay: 42 * time.Millisecond, DiskFullStable: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := parse([]byte(tc.in))
			if got != tc.want {
				t.Errorf("state %v, want %v", got, tc.want)
			}
			if len(errs) != tc.badLine {
				t.Errorf("errors %v, want %d", errs, tc.badLine)
			}
		})
	}
}

// fixture is a Points over a temp dir that re-reads the file on every use
// (interval 0), with its log captured.
type fixture struct {
	dir string
	p   *Points
	log *bytes.Buffer
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	var buf bytes.Buffer
	p := Open(dir, slogTo(&buf))
	p.interval = 0
	p.next.Store(0)
	return &fixture{dir: dir, p: p, log: &buf}
}

// write replaces the control file atomically, as the chaos tool should.
func (f *fixture) write(t *testing.T, content string) {
	t.Helper()
	tmp := filepath.Join(f.dir, FileName+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(f.dir, FileName)); err != nil {
		t.Fatal(err)
	}
}

func TestFileControlsState(t *testing.T) {
	f := newFixture(t)
	if st := f.p.current(); !st.Off() {
		t.Fatalf("no file: %v, want all off", st)
	}
	f.write(t, "disk-full=true\n")
	if st := f.p.current(); !st.DiskFull {
		t.Fatalf("after writing disk-full=true: %v", st)
	}
	if !strings.Contains(f.log.String(), "failpoints changed") {
		t.Errorf("a change is not logged: %q", f.log.String())
	}
	f.write(t, "disk-full=false\nfsync-delay=5ms\n")
	if st := f.p.current(); st.DiskFull || st.FsyncDelay != 5*time.Millisecond {
		t.Fatalf("after rewriting: %v", st)
	}
	if err := os.Remove(filepath.Join(f.dir, FileName)); err != nil {
		t.Fatal(err)
	}
	if st := f.p.current(); !st.Off() {
		t.Fatalf("file removed: %v, want all off", st)
	}
}

func TestMalformedLineLoggedOnce(t *testing.T) {
	f := newFixture(t)
	f.write(t, "bogus=1\ndisk-full=true\n")
	for range 5 {
		if st := f.p.current(); !st.DiskFull {
			t.Fatalf("the good line does not apply: %v", st)
		}
	}
	if n := strings.Count(f.log.String(), "ignoring a failpoint line"); n != 1 {
		t.Fatalf("malformed line logged %d times, want once:\n%s", n, f.log.String())
	}
}

// TestRefreshIsCached: within the interval the file is not looked at, so a
// change shows only once the interval has passed.
func TestRefreshIsCached(t *testing.T) {
	dir := t.TempDir()
	p := Open(dir, nil)
	p.interval = time.Hour
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("disk-full=true"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st := p.current(); st.DiskFull {
		t.Fatalf("re-read within the interval: %v", st)
	}
	p.next.Store(0) // the interval has passed
	if st := p.current(); !st.DiskFull {
		t.Fatalf("not re-read once due: %v", st)
	}
}

func TestOpenReadsFileAtStart(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("disk-full=true"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Open(dir, nil).CheckStorage(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("CheckStorage with disk-full set before Open: %v, want ENOSPC", err)
	}
}

func logs(from, to uint64) []*raft.Log {
	var out []*raft.Log
	for i := from; i <= to; i++ {
		out = append(out, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte{byte(i)}})
	}
	return out
}

func TestDiskFullLogStore(t *testing.T) {
	f := newFixture(t)
	inner := raft.NewInmemStore()
	s := f.p.LogStore(inner)
	if err := s.StoreLogs(logs(1, 2)); err != nil {
		t.Fatal(err)
	}
	f.write(t, "disk-full=true")
	if err := s.StoreLogs(logs(3, 4)); !errors.Is(err, syscall.ENOSPC) || !errors.Is(err, ErrDiskFull) {
		t.Fatalf("StoreLogs with disk-full: %v, want ENOSPC", err)
	}
	if err := s.StoreLog(logs(3, 3)[0]); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("StoreLog with disk-full: %v, want ENOSPC", err)
	}
	if last, _ := inner.LastIndex(); last != 2 {
		t.Fatalf("a refused write was stored: last index %d, want 2", last)
	}
	var l raft.Log
	if err := s.GetLog(2, &l); err != nil {
		t.Fatalf("reads must pass through while the disk is full: %v", err)
	}
	if err := f.p.CheckStorage(); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("CheckStorage with disk-full: %v", err)
	}
	f.write(t, "disk-full=false")
	if err := s.StoreLogs(logs(3, 4)); err != nil {
		t.Fatalf("after turning disk-full off: %v", err)
	}
	if last, _ := inner.LastIndex(); last != 4 {
		t.Fatalf("last index %d, want 4", last)
	}
	if err := f.p.CheckStorage(); err != nil {
		t.Fatalf("CheckStorage after disk-full off: %v", err)
	}
}

func TestDiskFullStableStore(t *testing.T) {
	f := newFixture(t)
	inner := raft.NewInmemStore()
	s := f.p.StableStore(inner)
	f.write(t, "disk-full=true")
	// disk-full alone spares the stable store (doc.go says why).
	if err := s.SetUint64([]byte("CurrentTerm"), 2); err != nil {
		t.Fatalf("SetUint64 with disk-full: %v, want it let through", err)
	}
	f.write(t, "disk-full-stable=true")
	if err := s.SetUint64([]byte("CurrentTerm"), 3); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("SetUint64 with disk-full-stable: %v, want ENOSPC", err)
	}
	if err := s.Set([]byte("LastVoteCand"), []byte("n1")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Set with disk-full-stable: %v, want ENOSPC", err)
	}
	if v, _ := inner.GetUint64([]byte("CurrentTerm")); v != 2 {
		t.Fatalf("a refused SetUint64 was stored: %d, want 2", v)
	}
	if v, _ := inner.Get([]byte("LastVoteCand")); v != nil {
		t.Fatalf("a refused Set was stored: %q", v)
	}
	// disk-full-stable implies disk-full.
	if err := f.p.LogStore(inner).StoreLogs(logs(1, 1)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("StoreLogs with disk-full-stable: %v, want ENOSPC", err)
	}
	f.write(t, "")
	if err := s.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	if v, _ := inner.GetUint64([]byte("CurrentTerm")); v != 3 {
		t.Fatalf("CurrentTerm %d, want 3", v)
	}
}

func TestDiskFullSnapshotStore(t *testing.T) {
	f := newFixture(t)
	inner, err := raft.NewFileSnapshotStore(t.TempDir(), 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	s := f.p.SnapshotStore(inner)
	_, trans := raft.NewInmemTransport("")
	create := func(index uint64) (raft.SnapshotSink, error) {
		return s.Create(raft.SnapshotVersionMax, index, 1, raft.Configuration{}, 1, trans)
	}
	count := func() int {
		metas, err := s.List()
		if err != nil {
			t.Fatal(err)
		}
		return len(metas)
	}

	f.write(t, "disk-full=true")
	if _, err := create(10); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Create with disk-full: %v, want ENOSPC", err)
	}

	// The disk fills while a snapshot is written: the write and the close
	// fail and no snapshot is left behind.
	f.write(t, "")
	sink, err := create(20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("state")); err != nil {
		t.Fatal(err)
	}
	f.write(t, "disk-full=true")
	if _, err := sink.Write([]byte("more")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Write with disk-full: %v, want ENOSPC", err)
	}
	if err := sink.Close(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Close with disk-full: %v, want ENOSPC", err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d snapshots stored while the disk was full, want 0", n)
	}

	f.write(t, "disk-full=false")
	sink, err = create(30)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte("state")); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 1 {
		t.Fatalf("%d snapshots after disk-full off, want 1", n)
	}
}

// TestFsyncDelay asserts only a lower bound: the write took at least the
// configured delay. A busy machine can only make it longer.
func TestFsyncDelay(t *testing.T) {
	f := newFixture(t)
	inner := raft.NewInmemStore()
	ls, ss := f.p.LogStore(inner), f.p.StableStore(inner)
	const delay = 50 * time.Millisecond
	f.write(t, "fsync-delay="+delay.String())
	for name, write := range map[string]func() error{
		"StoreLogs": func() error { return ls.StoreLogs(logs(1, 3)) },
		"StoreLog":  func() error { return ls.StoreLog(logs(4, 4)[0]) },
		"Set":       func() error { return ss.Set([]byte("k"), []byte("v")) },
		"SetUint64": func() error { return ss.SetUint64([]byte("n"), 1) },
	} {
		start := time.Now()
		if err := write(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if took := time.Since(start); took < delay {
			t.Errorf("%s took %s, want at least %s", name, took, delay)
		}
	}
	if last, _ := inner.LastIndex(); last != 4 {
		t.Fatalf("delayed writes not stored: last index %d, want 4", last)
	}
}

func TestNilPointsIsOff(t *testing.T) {
	var p *Points
	inner := raft.NewInmemStore()
	if p.LogStore(inner) != raft.LogStore(inner) || p.StableStore(inner) != raft.StableStore(inner) {
		t.Fatal("nil Points wrapped a store")
	}
	if err := p.CheckStorage(); err != nil {
		t.Fatal(err)
	}
	if !p.State().Off() {
		t.Fatal("nil Points is not all off")
	}
}

func TestEnabled(t *testing.T) {
	if !Enabled {
		t.Fatal("Enabled is false in a failpoints build")
	}
}

// TestLogStoreKeepsMonotonic: raft reads MonotonicLogStore by type
// assertion, so the failpoint wrapper must report what the store it wraps
// reports; raft-wal hidden behind it was wedged after a snapshot install.
func TestLogStoreKeepsMonotonic(t *testing.T) {
	f := newFixture(t)
	for _, tt := range []struct {
		name  string
		store raft.LogStore
		want  bool
	}{
		{"a monotonic store stays monotonic", &raft.MockMonotonicLogStore{}, true},
		{"a plain store stays plain", raft.NewInmemStore(), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			m, ok := f.p.LogStore(tt.store).(raft.MonotonicLogStore)
			if got := ok && m.IsMonotonic(); got != tt.want {
				t.Fatalf("IsMonotonic = %v, want %v", got, tt.want)
			}
		})
	}
}
