//go:build failpoints

package failpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// Enabled reports whether failpoints are compiled in (build tag failpoints).
const Enabled = true

// Points are one node's failpoints, controlled by <data-dir>/failpoints.
// A nil *Points is all off. Methods are safe for concurrent use.
type Points struct {
	path     string
	logger   *slog.Logger
	interval time.Duration // RefreshInterval; tests set 0 to re-read on every use

	state atomic.Pointer[State]
	next  atomic.Int64 // UnixNano after which the file is looked at again

	mu      sync.Mutex  // held by the one goroutine re-reading the file
	read    fs.FileInfo // the file as last read; nil: none
	statErr string      // last stat or read error logged, so it is logged once
}

// Open returns the failpoints of the node whose data directory is dataDir.
// It reads the file once now, so faults set before start-up apply from the
// first write.
func Open(dataDir string, logger *slog.Logger) *Points {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	p := &Points{
		path:     filepath.Join(dataDir, FileName),
		logger:   logger.With("component", "failpoint"),
		interval: RefreshInterval,
	}
	p.state.Store(&State{})
	p.mu.Lock()
	p.reload(time.Now().UnixNano())
	p.mu.Unlock()
	return p
}

// State is the failpoints' state now, after re-reading the file if it is
// due. A nil Points is all off.
func (p *Points) State() State { return p.current() }

// current is the state, re-reading the file when it is due. A caller that
// finds another goroutine re-reading uses the previous state.
func (p *Points) current() State {
	if p == nil {
		return State{}
	}
	if now := time.Now().UnixNano(); now >= p.next.Load() && p.mu.TryLock() {
		p.reload(now)
		p.mu.Unlock()
	}
	return *p.state.Load()
}

// reload re-reads the file if it changed. p.mu must be held.
func (p *Points) reload(now int64) {
	defer p.next.Store(now + int64(p.interval))
	fi, err := os.Stat(p.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		p.read = nil
		p.set(State{})
		return
	case err != nil:
		p.readFailed(err)
		return
	}
	// A new inode (the file was replaced by a rename), a new mtime or a new
	// size means a new version. mtime alone is too coarse: the kernel
	// stamps files with a clock that ticks every few milliseconds.
	if p.read != nil && os.SameFile(p.read, fi) && fi.ModTime().Equal(p.read.ModTime()) && fi.Size() == p.read.Size() {
		return
	}
	data, err := os.ReadFile(p.path)
	if err != nil {
		p.readFailed(err)
		return
	}
	p.read, p.statErr = fi, ""
	st, errs := parse(data)
	for _, e := range errs {
		p.logger.Error("ignoring a failpoint line", "file", p.path, "error", e)
	}
	p.set(st)
}

// readFailed keeps the previous state and logs err unless it was the last
// error logged.
func (p *Points) readFailed(err error) {
	if s := err.Error(); s != p.statErr {
		p.statErr = s
		p.logger.Error("cannot read the failpoint file; keeping the previous state", "file", p.path, "error", err)
	}
}

func (p *Points) set(st State) {
	if old := *p.state.Load(); old != st {
		p.state.Store(&st)
		p.logger.Warn("failpoints changed", "from", old.String(), "to", st.String())
	}
}

// parse reads the file's lines; each bad line is one error, and the other
// lines still apply.
func parse(data []byte) (State, []error) {
	var (
		st   State
		errs []error
	)
	for i, line := range bytes.Split(data, []byte("\n")) {
		l := strings.TrimSpace(string(line))
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		bad := func(why string) { errs = append(errs, fmt.Errorf("line %d %q: %s", i+1, l, why)) }
		key, val, ok := strings.Cut(l, "=")
		if !ok {
			bad("want key=value")
			continue
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch key {
		case "fsync-delay":
			d, err := time.ParseDuration(val)
			if err != nil || d < 0 || d > MaxFsyncDelay {
				bad(fmt.Sprintf("want a duration from 0 to %s", MaxFsyncDelay))
				continue
			}
			st.FsyncDelay = d
		case "disk-full", "disk-full-stable":
			b, err := strconv.ParseBool(val)
			if err != nil {
				bad("want true or false")
				continue
			}
			if key == "disk-full" {
				st.DiskFull = b
			} else {
				st.DiskFullStable = b
			}
		default:
			bad("unknown failpoint")
		}
	}
	return st, errs
}

// before runs the failpoints in front of one write: it returns ErrDiskFull
// when the disk is full for this kind of write, and otherwise sleeps
// fsync-delay. Callers add what they were writing.
func (p *Points) before(stable bool) error {
	st := p.current()
	if st.DiskFullStable || (st.DiskFull && !stable) {
		return ErrDiskFull
	}
	if st.FsyncDelay > 0 {
		time.Sleep(st.FsyncDelay)
	}
	return nil
}

// CheckStorage fails with ErrDiskFull while a disk-full failpoint is on.
func (p *Points) CheckStorage() error {
	if st := p.current(); st.DiskFull || st.DiskFullStable {
		return fmt.Errorf("%w (set in %s)", ErrDiskFull, p.path)
	}
	return nil
}

// LogStore wraps s so its appends run the failpoints first. Nil p: s.
func (p *Points) LogStore(s raft.LogStore) raft.LogStore {
	if p == nil {
		return s
	}
	return &logStore{LogStore: s, p: p}
}

// StableStore wraps s so its writes run the failpoints first. Nil p: s.
func (p *Points) StableStore(s raft.StableStore) raft.StableStore {
	if p == nil {
		return s
	}
	return &stableStore{StableStore: s, p: p}
}

// SnapshotStore wraps s so creating and writing snapshots run the
// failpoints first. Nil p: s.
func (p *Points) SnapshotStore(s raft.SnapshotStore) raft.SnapshotStore {
	if p == nil {
		return s
	}
	return &snapshotStore{SnapshotStore: s, p: p}
}

// logStore keeps every other behaviour of the store it wraps, IsMonotonic
// included: raft reads it by type assertion, and a raft-wal store that
// stops looking monotonic is compacted after a snapshot install with its
// trailing logs kept, below the snapshot, so the next append is refused
// as non-monotonic and the node is wedged (found by chaos-short: a
// full-disk fault, then a kill, then an installed snapshot).
type logStore struct {
	raft.LogStore
	p *Points
}

var _ raft.MonotonicLogStore = (*logStore)(nil)

// IsMonotonic reports what the wrapped store reports (raft-wal: true).
func (s *logStore) IsMonotonic() bool {
	m, ok := s.LogStore.(raft.MonotonicLogStore)
	return ok && m.IsMonotonic()
}

func (s *logStore) StoreLog(l *raft.Log) error {
	if err := s.p.before(false); err != nil {
		return fmt.Errorf("store log %d: %w", l.Index, err)
	}
	return s.LogStore.StoreLog(l)
}

func (s *logStore) StoreLogs(ls []*raft.Log) error {
	if len(ls) > 0 {
		if err := s.p.before(false); err != nil {
			return fmt.Errorf("store logs %d-%d: %w", ls[0].Index, ls[len(ls)-1].Index, err)
		}
	}
	return s.LogStore.StoreLogs(ls)
}

type stableStore struct {
	raft.StableStore
	p *Points
}

func (s *stableStore) Set(k, v []byte) error {
	if err := s.p.before(true); err != nil {
		return fmt.Errorf("set %q: %w", k, err)
	}
	return s.StableStore.Set(k, v)
}

func (s *stableStore) SetUint64(k []byte, v uint64) error {
	if err := s.p.before(true); err != nil {
		return fmt.Errorf("set %q: %w", k, err)
	}
	return s.StableStore.SetUint64(k, v)
}

type snapshotStore struct {
	raft.SnapshotStore
	p *Points
}

func (s *snapshotStore) Create(version raft.SnapshotVersion, index, term uint64, configuration raft.Configuration,
	configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	if st := s.p.current(); st.DiskFull || st.DiskFullStable {
		return nil, fmt.Errorf("create snapshot at index %d: %w", index, ErrDiskFull)
	}
	sink, err := s.SnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &snapshotSink{SnapshotSink: sink, p: s.p}, nil
}

// snapshotSink fails writes while the disk is full, and on Close cancels
// the snapshot (the store then keeps no trace of it) and fails.
type snapshotSink struct {
	raft.SnapshotSink
	p *Points
}

func (s *snapshotSink) Write(b []byte) (int, error) {
	if st := s.p.current(); st.DiskFull || st.DiskFullStable {
		return 0, fmt.Errorf("write snapshot %s: %w", s.ID(), ErrDiskFull)
	}
	return s.SnapshotSink.Write(b)
}

func (s *snapshotSink) Close() error {
	if err := s.p.before(false); err != nil {
		_ = s.SnapshotSink.Cancel()
		return fmt.Errorf("close snapshot %s: %w", s.ID(), err)
	}
	return s.SnapshotSink.Close()
}
