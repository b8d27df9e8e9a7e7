package cluster

import (
	"fmt"
	"io"

	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"
)

// raft-wal preallocates each 64 MiB segment with fallocate, which leaves
// its blocks as unwritten extents. The first write into such a block
// turns it into a written one, a change of the file's extent tree, so on
// ext4 every append's fsync also commits the journal. Writing the zeros
// ourselves a little ahead of the log makes the blocks the log lands on
// written already, and the fsync then flushes the data alone. On the
// 2-core VM of docs/BENCHMARKS.md a 6 KB append and fsync took 261-280 µs
// of wall time and 129-138 µs of CPU into fallocate's blocks, and
// 154-179 µs and 67-86 µs with the zeros written 256 KiB ahead (the same
// as a segment zeroed whole at creation, without its 64 MiB stall).
// PostgreSQL zero-fills its WAL segments for the same reason
// (wal_init_zero).
//
// What a reader sees does not change: fallocate's blocks read as zeros,
// and raft-wal treats everything past its write offset as unwritten, at
// recovery too.
const (
	// zeroAheadChunk is how much is zeroed at a time: one write of it
	// makes the next few dozen appends' fsyncs cheap, and costs the one
	// fsync that flushes it well under a millisecond.
	zeroAheadChunk = 256 << 10
	// zeroAheadMin is how far ahead of the log's end the zeros are kept,
	// so that an append of up to this size lands on written blocks.
	zeroAheadMin = zeroAheadChunk / 2
)

// zeroChunk is written, never modified: WriteAt only reads it.
var zeroChunk = make([]byte, zeroAheadChunk)

// zeroAheadFS is raft-wal's file system with segments zeroed ahead of
// their writes (zeroAheadFile).
type zeroAheadFS struct {
	types.VFS
}

func newZeroAheadFS() zeroAheadFS { return zeroAheadFS{VFS: fs.New()} }

// Create creates a segment preallocated to size, as raft-wal's does.
func (z zeroAheadFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := z.VFS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	return &zeroAheadFile{WritableFile: f, limit: int64(size)}, nil
}

// OpenWriter opens the tail segment raft-wal recovers on start. Its
// preallocated size is its length on disk.
func (z zeroAheadFS) OpenWriter(dir, name string) (types.WritableFile, error) {
	f, err := z.VFS.OpenWriter(dir, name)
	if err != nil {
		return nil, err
	}
	sized, ok := f.(io.Seeker)
	if !ok {
		return f, nil
	}
	size, err := sized.Seek(0, io.SeekEnd)
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("cluster: size of raft log segment %s: %w", name, err)
	}
	return &zeroAheadFile{WritableFile: f, limit: size}, nil
}

// zeroAheadFile keeps the bytes from the end of the furthest write to at
// least zeroAheadMin beyond it written with zeros, up to the file's
// preallocated size (limit).
//
// It writes zeros only past every byte written so far (written), so it
// never touches the log: raft-wal appends in order, and when it rolls
// back a failed append it writes again at an offset below written, which
// the zeros never reach. raft-wal calls WriteAt from its one writer,
// under the WAL's write lock, so the fields need no lock of their own.
type zeroAheadFile struct {
	types.WritableFile
	limit   int64 // preallocated size; the zeros stop here
	written int64 // end of the furthest write, data or zeros
}

// WriteAt writes p at off, then the zeros ahead of it if they have run
// short. The zeros are an optimisation: if writing them fails the error is
// not the append's (its own data is written), and the next append tries
// again; a disk that fails writes fails the fsync raft-wal calls next.
func (f *zeroAheadFile) WriteAt(p []byte, off int64) (int, error) {
	n, err := f.WritableFile.WriteAt(p, off)
	end := off + int64(n)
	f.written = max(f.written, end)
	if err != nil {
		return n, err
	}
	if f.written-end < zeroAheadMin && f.written < f.limit {
		zeros := zeroChunk[:min(int64(len(zeroChunk)), f.limit-f.written)]
		if z, zerr := f.WritableFile.WriteAt(zeros, f.written); zerr == nil || z == len(zeros) {
			f.written += int64(z)
		}
	}
	return n, nil
}
