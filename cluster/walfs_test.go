package cluster

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"github.com/hashicorp/raft-wal/types"
)

// memFile is a types.WritableFile in memory that can be made to fail the
// data writes or the zero writes.
type memFile struct {
	b                    []byte
	failData, failZeroes bool
}

var errDisk = errors.New("disk failed")

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	zeros := len(p) > 0 && &p[0] == &zeroChunk[0]
	if zeros && m.failZeroes || !zeros && m.failData {
		return 0, errDisk
	}
	if need := off + int64(len(p)); need > int64(len(m.b)) {
		m.b = append(m.b, make([]byte, need-int64(len(m.b)))...)
	}
	return copy(m.b[off:], p), nil
}
func (m *memFile) ReadAt(p []byte, off int64) (int, error) { return copy(p, m.b[off:]), nil }
func (m *memFile) Close() error                            { return nil }
func (m *memFile) Sync() error                             { return nil }

// TestZeroAheadFile: the zeros run ahead of the furthest write, stop at the
// preallocated size, never overwrite a byte the log wrote (a rolled-back
// append written again lower down included), and a failure to write them
// is not the append's.
func TestZeroAheadFile(t *testing.T) {
	type write struct {
		off  int64
		size int
	}
	const limit = 3 * zeroAheadChunk
	cases := []struct {
		name        string
		writes      []write
		failZeroes  bool
		wantWritten int64 // how far the file is written, data or zeros
	}{
		{"a header then appends", []write{{0, 64}, {64, 6000}, {6064, 6000}}, false, zeroAheadChunk + 64},
		{"an append that ends near the zeros' end draws the next chunk",
			[]write{{0, 64}, {64, zeroAheadChunk - zeroAheadMin + 1}}, false, 2*zeroAheadChunk + 64},
		{"the zeros stop at the preallocated size", []write{{0, 64}, {64, limit - 1000}}, false, limit},
		{"a write past the preallocated size draws no zeros", []write{{0, limit + 10}}, false, limit + 10},
		{"a rolled-back append written again lower down",
			[]write{{0, 64}, {64, 200 << 10}, {64, 100}, {164, 500}}, false, 2*zeroAheadChunk + 64},
		{"zeros that fail are tried with the next append", []write{{0, 64}, {64, 100}}, true, 164},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := &memFile{failZeroes: tc.failZeroes}
			f := &zeroAheadFile{WritableFile: m, limit: limit}
			// want is what the log wrote, byte by byte; nil where it wrote nothing.
			want := map[int64]byte{}
			for i, w := range tc.writes {
				p := bytes.Repeat([]byte{byte(i + 1)}, w.size)
				if n, err := f.WriteAt(p, w.off); n != w.size || err != nil {
					t.Fatalf("write %d = %d, %v", i, n, err)
				}
				for j := range p {
					want[w.off+int64(j)] = p[j]
				}
			}
			if f.written != tc.wantWritten || int64(len(m.b)) != tc.wantWritten {
				t.Errorf("written to %d (file %d bytes), want %d", f.written, len(m.b), tc.wantWritten)
			}
			for off, b := range m.b {
				if w, ok := want[int64(off)]; ok && b != w || !ok && b != 0 {
					t.Fatalf("byte %d is %d, want %d (log wrote it: %v)", off, b, w, ok)
				}
			}
			if tc.failZeroes {
				m.failZeroes = false
				if _, err := f.WriteAt([]byte{9}, f.written); err != nil {
					t.Fatal(err)
				}
				if f.written < zeroAheadChunk {
					t.Errorf("after the disk recovered the zeros reach %d, want at least %d", f.written, zeroAheadChunk)
				}
			}
		})
	}

	t.Run("a failed data write returns its error and draws no zeros", func(t *testing.T) {
		m := &memFile{failData: true}
		f := &zeroAheadFile{WritableFile: m, limit: limit}
		if _, err := f.WriteAt([]byte("entry"), 0); !errors.Is(err, errDisk) {
			t.Fatalf("err %v, want the disk's", err)
		}
		if f.written != 0 || len(m.b) != 0 {
			t.Errorf("written %d, file %d bytes after a failed write", f.written, len(m.b))
		}
	})
}

// TestZeroAheadWAL: a WAL on the zeroing file system keeps every entry
// across segment rolls and a restart, each segment's preallocated size
// unchanged by the zeros, and can append after it.
func TestZeroAheadWAL(t *testing.T) {
	dir := t.TempDir()
	const segmentSize = 1 << 20
	open := func() *wal.WAL {
		t.Helper()
		w, err := wal.Open(dir, wal.WithLogger(hclog.NewNullLogger()), wal.WithMetaStore(&metadb.BoltMetaDB{}),
			wal.WithSegmentSize(segmentSize), wal.WithSegmentFiler(segment.NewFiler(dir, newZeroAheadFS())))
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	check := func(w *wal.WAL, last uint64) {
		t.Helper()
		for _, idx := range []uint64{1, last / 2, last} {
			var l raft.Log
			if err := w.GetLog(idx, &l); err != nil || l.Index != idx || !bytes.Equal(l.Data, testLogs(idx, idx)[0].Data) {
				t.Fatalf("GetLog(%d) = index %d, %d bytes, %v", idx, l.Index, len(l.Data), err)
			}
		}
	}
	w := open()
	// 3,000 entries of about 1.6 KB: five segments of 1 MiB.
	for i := uint64(1); i <= 3000; i += 10 {
		if err := w.StoreLogs(testLogs(i, i+9)); err != nil {
			t.Fatal(err)
		}
	}
	check(w, 3000)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	segments, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(segments) < 3 {
		t.Fatalf("%d segments, want the test to roll several", len(segments))
	}
	for _, s := range segments {
		// raft-wal lets the batch that fills a segment run past its size.
		if fi, err := os.Stat(s); err != nil || fi.Size() < segmentSize || fi.Size() > segmentSize+64<<10 {
			t.Errorf("segment %s: %d bytes, %v; want its preallocated %d and at most the last batch more", s, fi.Size(), err, segmentSize)
		}
	}

	w = open()
	defer w.Close()
	check(w, 3000)
	if err := w.StoreLogs(testLogs(3001, 3100)); err != nil {
		t.Fatalf("append after the restart: %v", err)
	}
	check(w, 3100)
}

var _ types.VFS = zeroAheadFS{}

// BenchmarkWALAppend: one raft append of three 1.5 KB entries (a batch at
// 16 clients) and its fsync, into segments preallocated by raft-wal
// (fallocate's unwritten blocks) and into segments zeroed ahead.
func BenchmarkWALAppend(b *testing.B) {
	for _, tc := range []struct {
		name string
		vfs  types.VFS
	}{{"fallocate", fs.New()}, {"zero-ahead", newZeroAheadFS()}} {
		b.Run(tc.name, func(b *testing.B) {
			dir := b.TempDir()
			w, err := wal.Open(dir, wal.WithLogger(hclog.NewNullLogger()), wal.WithMetaStore(&metadb.BoltMetaDB{}),
				wal.WithSegmentFiler(segment.NewFiler(dir, tc.vfs)))
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			data := bytes.Repeat([]byte{7}, 1500)
			batch := make([]*raft.Log, 3)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for j := range batch {
					batch[j] = &raft.Log{Index: uint64(i*3 + j + 1), Term: 1, Type: raft.LogCommand, Data: data}
				}
				if err := w.StoreLogs(batch); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
