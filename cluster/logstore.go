package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/migrate"
	"github.com/hashicorp/raft-wal/segment"
	"go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
)

// The raft log and stable store live in <data-dir>/raft:
//
//	LOCK      held (flock) while a process uses the directory
//	wal/      raft-wal: append-only segment files and wal-meta.db (the
//	          segment list and the stable store's keys)
//	raft.db   the raft-boltdb file of data directories written before
//	          the WAL; migrated into wal/ when the node next starts
//
// raft-wal appends a batch of entries with one write and one fsync. bolt's
// commit syncs twice (the pages, then the meta page) and maps its whole
// file into memory, and the leader's StoreLogs is the serial step every
// write waits on.
const (
	lockFileName   = "LOCK"
	walDirName     = "wal"
	walTmpDirName  = "wal.migrating"
	legacyBoltName = "raft.db"

	// migrateBatchBytes is how much log data the migration appends at a
	// time.
	migrateBatchBytes = 4 << 20
)

// boltConfBucket is raft-boltdb's bucket of stable-store keys.
var boltConfBucket = []byte("conf")

// diskStore is a data directory's raft log and stable store and the lock
// that keeps a second process out of it.
type diskStore struct {
	*wal.WAL
	lock *os.File
}

// Close closes the WAL and then releases the directory.
func (s *diskStore) Close() error {
	err := s.WAL.Close()
	if cerr := s.lock.Close(); err == nil {
		err = cerr
	}
	return err
}

// GetLog answers raft.ErrLogNotFound below FirstIndex. raft-wal truncates
// the head of its unsealed tail segment only in its index and still reads
// the entries there, so after a snapshot the leader would keep sending a
// lagging follower entries it has compacted away instead of the snapshot,
// for as long as they sit in the 64 MiB tail.
func (s *diskStore) GetLog(index uint64, log *raft.Log) error {
	first, err := s.FirstIndex()
	if err != nil {
		return err
	}
	if index < first {
		return raft.ErrLogNotFound
	}
	return s.WAL.GetLog(index, log)
}

// openWALDir opens the WAL in dir, its segments zeroed ahead of the log
// (walfs.go). WAL.Close closes its metadata database; a failed Open leaves
// it to the caller.
func openWALDir(dir string, logger hclog.Logger) (*wal.WAL, error) {
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(dir, wal.WithLogger(logger.Named("wal")), wal.WithMetaStore(meta),
		wal.WithSegmentFiler(segment.NewFiler(dir, newZeroAheadFS())))
	if err != nil {
		_ = meta.Close()
		return nil, fmt.Errorf("cluster: open raft log %s: %w", dir, err)
	}
	return w, nil
}

// openLogStore locks raftDir and opens its WAL, first migrating a
// raft-boltdb file left by an earlier version. A directory another process
// holds fails within boltOpenTimeout, never hangs: two nodes on one log
// would corrupt it.
func openLogStore(raftDir string, logger hclog.Logger) (*diskStore, error) {
	lock, err := lockDir(raftDir)
	if err != nil {
		return nil, err
	}
	w, err := openWAL(raftDir, logger)
	if err != nil {
		_ = lock.Close()
		return nil, err
	}
	return &diskStore{WAL: w, lock: lock}, nil
}

// lockDir takes raftDir's lock file.
func lockDir(raftDir string) (*os.File, error) {
	p := filepath.Join(raftDir, lockFileName)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("cluster: open %s: %w", p, err)
	}
	// A process killed a moment ago may not have released it yet (a
	// restart right after kill -9): wait up to boltOpenTimeout, as bolt's
	// own lock did, then fail rather than hang.
	deadline := time.Now().Add(boltOpenTimeout)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || time.Now().After(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("cluster: lock %s (is another process using the data directory?): %w", p, err)
		}
		time.Sleep(lockRetry)
	}
}

// lockRetry is how often lockDir tries again.
const lockRetry = 50 * time.Millisecond

// openWAL opens raftDir's WAL. The migration from raft.db is crash-safe
// because the WAL is built under another name and renamed into place
// whole, and raft.db is removed only after that rename is durable: a
// half-built WAL is discarded and rebuilt, and a raft.db beside a
// complete WAL is the leftover of a migration that finished.
func openWAL(raftDir string, logger hclog.Logger) (*wal.WAL, error) {
	dir := filepath.Join(raftDir, walDirName)
	legacy := filepath.Join(raftDir, legacyBoltName)
	switch _, err := os.Stat(dir); {
	case err == nil:
		if err := os.Remove(legacy); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("cluster: remove the migrated %s: %w", legacy, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("cluster: raft log %s: %w", dir, err)
	default:
		if err := createWAL(raftDir, legacy, logger); err != nil {
			return nil, err
		}
	}
	return openWALDir(dir, logger)
}

// createWAL makes raftDir/wal: empty for a new data directory, or holding
// every log entry and stable key of legacy.
func createWAL(raftDir, legacy string, logger hclog.Logger) error {
	tmp := filepath.Join(raftDir, walTmpDirName)
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("cluster: remove an unfinished migration %s: %w", tmp, err)
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("cluster: create %s: %w", tmp, err)
	}
	switch _, err := os.Stat(legacy); {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return fmt.Errorf("cluster: raft log %s: %w", legacy, err)
	default:
		logger.Info("migrating the raft log from raft-boltdb to raft-wal", "from", legacy)
		if err := migrateBolt(legacy, tmp, logger); err != nil {
			return err
		}
	}
	if err := syncDir(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(raftDir, walDirName)); err != nil {
		return fmt.Errorf("cluster: move the raft log into place: %w", err)
	}
	if err := syncDir(raftDir); err != nil {
		return err
	}
	if err := os.Remove(legacy); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("cluster: remove the migrated %s: %w", legacy, err)
	}
	return nil
}

// migrateBolt copies legacy's log entries and stable keys into a new WAL
// in dir. The copy is closed (synced) before it returns.
func migrateBolt(legacy, dir string, logger hclog.Logger) (err error) {
	dst, err := openWALDir(dir, logger)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := dst.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("cluster: close raft log %s: %w", dir, cerr)
		}
	}()
	src, err := raftboltdb.New(raftboltdb.Options{
		Path:        legacy,
		BoltOptions: &bbolt.Options{Timeout: boltOpenTimeout},
	})
	if err != nil {
		return fmt.Errorf("cluster: open raft log %s: %w", legacy, err)
	}
	if last, lerr := src.LastIndex(); lerr == nil && last > 0 {
		err = migrate.CopyLogs(context.Background(), dst, src, migrateBatchBytes, nil)
	} else {
		err = lerr
	}
	if cerr := src.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cluster: copy the raft log from %s: %w", legacy, err)
	}
	return copyStableKeys(legacy, dst)
}

// uint64Keys are the stable keys raft writes with SetUint64. raft-boltdb
// stores such a value big-endian and raft-wal little-endian, so these are
// converted, not copied.
var uint64Keys = map[string]bool{"CurrentTerm": true, "LastVoteTerm": true}

// copyStableKeys copies every key of raft-boltdb's stable store: raft's
// term and vote, and this package's own (the data directory's identity).
func copyStableKeys(legacy string, dst raft.StableStore) error {
	db, err := bbolt.Open(legacy, 0o600, &bbolt.Options{ReadOnly: true, Timeout: boltOpenTimeout})
	if err != nil {
		return fmt.Errorf("cluster: open %s: %w", legacy, err)
	}
	defer db.Close()
	return db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket(boltConfBucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			var err error
			switch {
			case uint64Keys[string(k)] && len(v) == 8:
				err = dst.SetUint64(append([]byte(nil), k...), binary.BigEndian.Uint64(v))
			case uint64Keys[string(k)]:
				err = fmt.Errorf("%d bytes, not a uint64", len(v))
			default:
				err = dst.Set(append([]byte(nil), k...), append([]byte(nil), v...))
			}
			if err != nil {
				return fmt.Errorf("cluster: copy stable key %q: %w", k, err)
			}
			return nil
		})
	})
}
