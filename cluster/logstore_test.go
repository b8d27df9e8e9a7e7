package cluster

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

func testLogs(first, last uint64) []*raft.Log {
	var logs []*raft.Log
	for i := first; i <= last; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 3, Type: raft.LogCommand, Data: bytes.Repeat([]byte{byte(i)}, 100+int(i))})
	}
	return logs
}

// writeLegacy writes raft.db as a data directory of the raft-boltdb era
// left it: a log compacted to [first, last], raft's term and vote, and the
// data directory's identity.
func writeLegacy(t *testing.T, raftDir string, first, last uint64) {
	t.Helper()
	b, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(raftDir, legacyBoltName)})
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(b.StoreLogs(testLogs(1, last)))
	if first > 1 {
		must(b.DeleteRange(1, first-1))
	}
	must(b.SetUint64([]byte("CurrentTerm"), 7))
	must(b.SetUint64([]byte("LastVoteTerm"), 6))
	must(b.Set([]byte("LastVoteCand"), []byte("node-b")))
	must(b.Set(dataDirKey, []byte("0123456789abcdef")))
	must(b.Close())
}

// checkMigrated says whether s holds what writeLegacy wrote.
func checkMigrated(t *testing.T, s *diskStore, first, last uint64) {
	t.Helper()
	if got, _ := s.FirstIndex(); got != first {
		t.Errorf("first index %d, want %d", got, first)
	}
	if got, _ := s.LastIndex(); got != last {
		t.Errorf("last index %d, want %d", got, last)
	}
	for _, want := range testLogs(first, last) {
		var got raft.Log
		if err := s.GetLog(want.Index, &got); err != nil {
			t.Fatalf("entry %d: %v", want.Index, err)
		}
		if got.Term != want.Term || got.Type != want.Type || !bytes.Equal(got.Data, want.Data) {
			t.Fatalf("entry %d differs: term %d type %v %d bytes", want.Index, got.Term, got.Type, len(got.Data))
		}
	}
	if v, err := s.GetUint64([]byte("CurrentTerm")); err != nil || v != 7 {
		t.Errorf("CurrentTerm %d, %v; want 7", v, err)
	}
	if v, err := s.GetUint64([]byte("LastVoteTerm")); err != nil || v != 6 {
		t.Errorf("LastVoteTerm %d, %v; want 6", v, err)
	}
	if v, err := s.Get([]byte("LastVoteCand")); err != nil || string(v) != "node-b" {
		t.Errorf("LastVoteCand %q, %v", v, err)
	}
	if id, err := loadDataDirID(s); err != nil || id != "0123456789abcdef" {
		t.Errorf("data directory identity %q, %v: a migrated node must keep its identity", id, err)
	}
}

func openTestStore(t *testing.T, dir string) *diskStore {
	t.Helper()
	s, err := openLogStore(dir, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestLogStoreMigratesBolt(t *testing.T) {
	cases := []struct {
		name        string
		first, last uint64
		// prepare runs after raft.db is written: the states a migration
		// interrupted by a crash can leave.
		prepare func(t *testing.T, dir string)
	}{
		{name: "a compacted log", first: 40, last: 300},
		{name: "the whole log", first: 1, last: 20},
		{name: "an unfinished earlier migration is rebuilt", first: 5, last: 50, prepare: func(t *testing.T, dir string) {
			tmp := filepath.Join(dir, walTmpDirName)
			if err := os.MkdirAll(tmp, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(tmp, "wal-meta.db"), []byte("torn"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeLegacy(t, dir, tc.first, tc.last)
			if tc.prepare != nil {
				tc.prepare(t, dir)
			}
			s := openTestStore(t, dir)
			checkMigrated(t, s, tc.first, tc.last)
			for _, gone := range []string{legacyBoltName, walTmpDirName} {
				if _, err := os.Stat(filepath.Join(dir, gone)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s is still there after the migration: %v", gone, err)
				}
			}
			// The migrated log takes appends where the old one ended,
			// and keeps everything over a reopen.
			if err := s.StoreLogs(testLogs(tc.last+1, tc.last+3)); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s = openTestStore(t, dir)
			defer s.Close()
			checkMigrated(t, s, tc.first, tc.last+3)
		})
	}
}

// TestLogStoreFinishedMigrationWins: a raft.db beside a complete WAL is
// what a crash between the WAL's rename and raft.db's removal leaves. The
// WAL has taken writes since, so it must be used and raft.db removed, never
// migrated again over it.
func TestLogStoreFinishedMigrationWins(t *testing.T) {
	dir := t.TempDir()
	writeLegacy(t, dir, 1, 10)
	s := openTestStore(t, dir)
	if err := s.StoreLogs(testLogs(11, 12)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	writeLegacy(t, dir, 1, 5)

	s = openTestStore(t, dir)
	defer s.Close()
	checkMigrated(t, s, 1, 12)
	if _, err := os.Stat(filepath.Join(dir, legacyBoltName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("raft.db beside the WAL was kept: %v", err)
	}
}

func TestLogStoreNewAndLocked(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir)
	if last, err := s.LastIndex(); err != nil || last != 0 {
		t.Fatalf("a new log's last index %d, %v", last, err)
	}
	if _, err := openLogStore(dir, hclog.NewNullLogger()); err == nil {
		t.Fatal("a second open of a directory in use succeeded")
	}
	if err := s.StoreLogs(testLogs(1, 4)); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 9); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Closing releases the directory.
	s = openTestStore(t, dir)
	defer s.Close()
	if last, _ := s.LastIndex(); last != 4 {
		t.Errorf("last index %d after a reopen, want 4", last)
	}
	if v, _ := s.GetUint64([]byte("CurrentTerm")); v != 9 {
		t.Errorf("CurrentTerm %d after a reopen, want 9", v)
	}
}

// BenchmarkLogStoreAppend times the leader's serial step, one StoreLogs of
// a group-committed batch (16 entries of 1.5 KB, a create's size), on the
// WAL and on the raft-boltdb store it replaced. Both sync to disk.
//
//	go test -run '^$' -bench BenchmarkLogStoreAppend ./cluster/
func BenchmarkLogStoreAppend(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) raft.LogStore
	}{
		{"wal", func(b *testing.B) raft.LogStore {
			s, err := openLogStore(b.TempDir(), hclog.NewNullLogger())
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		}},
		{"bolt", func(b *testing.B) raft.LogStore {
			s, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(b.TempDir(), legacyBoltName)})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { _ = s.Close() })
			return s
		}},
	}
	data := bytes.Repeat([]byte("x"), 1500)
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			s := st.open(b)
			next := uint64(1)
			b.ResetTimer()
			for range b.N {
				logs := make([]*raft.Log, 16)
				for j := range logs {
					logs[j] = &raft.Log{Index: next, Term: 1, Type: raft.LogCommand, Data: data}
					next++
				}
				if err := s.StoreLogs(logs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestLogStoreTruncatedHeadIsGone: after raft compacts the log head (as it
// does after a snapshot), the entries below the new first index are not
// found, even where raft-wal still holds them in its tail segment; raft
// then sends a lagging follower the snapshot.
func TestLogStoreTruncatedHeadIsGone(t *testing.T) {
	s := openTestStore(t, t.TempDir())
	defer s.Close()
	if err := s.StoreLogs(testLogs(1, 100)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(1, 60); err != nil {
		t.Fatal(err)
	}
	if first, _ := s.FirstIndex(); first != 61 {
		t.Fatalf("first index %d after truncating 1-60, want 61", first)
	}
	var l raft.Log
	for _, idx := range []uint64{1, 30, 60} {
		if err := s.GetLog(idx, &l); !errors.Is(err, raft.ErrLogNotFound) {
			t.Errorf("GetLog(%d) below the first index = %v, want ErrLogNotFound", idx, err)
		}
	}
	for _, idx := range []uint64{61, 100} {
		if err := s.GetLog(idx, &l); err != nil || l.Index != idx {
			t.Errorf("GetLog(%d) = index %d, %v", idx, l.Index, err)
		}
	}
}

// TestLogStoreTruncatedTailSurvivesRestart: a follower that clears a
// conflicting suffix of its log (raft's "clearing log suffix") and is then
// killed opens its log again with every entry before the suffix, and can
// append after it. raft-wal v0.4.0 sealed the tail segment without its
// index block on such a truncation, and the restarted node panicked
// reading index 1 (hashicorp/raft-wal#31, fixed in v0.4.1).
func TestLogStoreTruncatedTailSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	s := openTestStore(t, dir)
	if err := s.StoreLogs(testLogs(1, 100)); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(91, 100); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs(testLogs(91, 95)); err != nil {
		t.Fatal(err)
	}
	// Close writes nothing a killed process would not have: it waits for
	// appends (each was synced) and closes the files, sealing nothing.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	r := openTestStore(t, dir)
	defer r.Close()
	if last, err := r.LastIndex(); err != nil || last != 95 {
		t.Fatalf("last index %d, %v after the restart, want 95", last, err)
	}
	var l raft.Log
	for _, idx := range []uint64{1, 50, 90, 91, 95} {
		if err := r.GetLog(idx, &l); err != nil || l.Index != idx {
			t.Fatalf("GetLog(%d) after the restart = index %d, %v", idx, l.Index, err)
		}
	}
	if err := r.StoreLogs(testLogs(96, 120)); err != nil {
		t.Fatalf("append after the restart: %v", err)
	}
}
