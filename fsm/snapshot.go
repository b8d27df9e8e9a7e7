package fsm

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"io"

	"github.com/google/btree"
	"github.com/hashicorp/raft"
)

// Snapshot wire format, version 1:
//
//	[7]byte  snapshotMagic
//	byte     SnapshotVersion
//	uvarint  applied index
//	uvarint  compacted revision
//	uvarint  number of keys
//	per key, in Key.String() order:
//	  string  Group (as the key's space writes it, keyspace.go), Resource, Namespace, Name
//	  uvarint number of versions (>= 1)
//	  per version, oldest first:
//	    byte    kind (0 tombstone, 1 live)
//	    uvarint revision (ModRevision, or the deleting revision)
//	    live only: uvarint CreateRevision, string UID, bytes Value
//	uint32   big-endian CRC-32C of every byte above
//
// string and bytes are a uvarint length then the bytes. The format is a
// pure function of the state, so two FSMs that applied the same log write
// identical bytes.
const (
	snapshotMagic = "TPFSNAP"
	// SnapshotVersion is the snapshot format this build writes and the
	// only one it reads.
	SnapshotVersion = 1

	kindTombstone = 0
	kindLive      = 1
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrBadSnapshot wraps every Restore and ReadExport failure caused by the
// snapshot's bytes (bad structure, unknown version, truncation, checksum).
// Nothing was changed.
var ErrBadSnapshot = errors.New("fsm: bad snapshot")

// fsmSnapshot is a point-in-time copy-on-write clone of the store. Apply
// keeps writing to the live tree while Persist reads this one, so neither
// waits for the other.
type fsmSnapshot struct {
	tree      *btree.BTreeG[entry]
	applied   uint64
	compacted uint64
}

// Persist serialises the clone; raft calls it off the apply goroutine, so
// the I/O never stalls writes. On any error the sink is cancelled so raft
// discards the partial snapshot.
func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := s.writeTo(sink, nil); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("fsm: persist snapshot at %d: %w", s.applied, err)
	}
	return sink.Close()
}

// Release is a no-op: the clone is garbage collected like any value.
func (s *fsmSnapshot) Release() {}

// flushAt is how much encoded data is buffered before it is written.
const flushAt = 64 << 10

// writeTo writes the snapshot format. Keys for which drop returns true
// are left out with their whole history (drop nil: none), so the result is
// still a snapshot some FSM could have persisted.
func (s *fsmSnapshot) writeTo(w io.Writer, drop func(Key) bool) error {
	nkeys := s.tree.Len()
	if drop != nil {
		nkeys = 0
		s.tree.Ascend(func(e entry) bool {
			if !drop(keyOf(e)) {
				nkeys++
			}
			return true
		})
	}
	h := crc32.New(crcTable)
	buf := make([]byte, 0, flushAt+4096)
	var werr error
	flush := func() {
		if werr != nil || len(buf) == 0 {
			buf = buf[:0]
			return
		}
		h.Write(buf)
		_, werr = w.Write(buf)
		buf = buf[:0]
	}

	buf = append(buf, snapshotMagic...)
	buf = append(buf, SnapshotVersion)
	buf = binary.AppendUvarint(buf, s.applied)
	buf = binary.AppendUvarint(buf, s.compacted)
	buf = binary.AppendUvarint(buf, uint64(nkeys))
	s.tree.Ascend(func(e entry) bool {
		k := keyOf(e)
		if drop != nil && drop(k) {
			return true
		}
		buf = appendString(buf, wireGroup(k.Space, k.Group))
		buf = appendString(buf, k.Resource)
		buf = appendString(buf, k.Namespace)
		buf = appendString(buf, k.Name)
		buf = binary.AppendUvarint(buf, uint64(len(e.versions)))
		for _, v := range e.versions {
			if v.kv == nil {
				buf = append(buf, kindTombstone)
				buf = binary.AppendUvarint(buf, v.rev)
				continue
			}
			buf = append(buf, kindLive)
			buf = binary.AppendUvarint(buf, v.rev)
			buf = binary.AppendUvarint(buf, v.kv.CreateRevision)
			buf = appendString(buf, v.kv.UID)
			buf = binary.AppendUvarint(buf, uint64(len(v.kv.Value)))
			buf = append(buf, v.kv.Value...)
			if len(buf) >= flushAt {
				flush()
			}
		}
		if len(buf) >= flushAt {
			flush()
		}
		return werr == nil
	})
	flush()
	if werr != nil {
		return werr
	}
	buf = binary.BigEndian.AppendUint32(buf, h.Sum32())
	_, err := w.Write(buf)
	return err
}

// keyOf recovers an entry's Key. Every entry's history starts with a live
// version (a tombstone always follows one, and compaction drops leading
// tombstones), so the fallback to parsing the key string is only defensive.
func keyOf(e entry) Key {
	for i := len(e.versions) - 1; i >= 0; i-- {
		if kv := e.versions[i].kv; kv != nil {
			return kv.Key
		}
	}
	k, _ := ParseKey(e.key)
	return k
}

// snapReader reads the snapshot and hashes exactly the bytes it consumes,
// so the trailing checksum can be checked against them.
type snapReader struct {
	r   *bufio.Reader
	crc hash.Hash32
	one [1]byte
}

func (r *snapReader) ReadByte() (byte, error) {
	c, err := r.r.ReadByte()
	if err != nil {
		return 0, err
	}
	r.one[0] = c
	r.crc.Write(r.one[:])
	return c, nil
}

func (r *snapReader) uvarint() (uint64, error) {
	return binary.ReadUvarint(r)
}

// bytes reads a length-prefixed field. A length that the input cannot back
// fails at EOF after allocating only what was actually read, so garbage
// cannot trigger a huge allocation.
func (r *snapReader) bytes() ([]byte, error) {
	n, err := r.uvarint()
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	var b []byte
	if n <= 1<<20 {
		b = make([]byte, n)
		if _, err := io.ReadFull(r.r, b); err != nil {
			return nil, err
		}
	} else {
		var bb bytes.Buffer
		got, err := io.CopyN(&bb, r.r, int64(min(n, 1<<62)))
		if err != nil {
			return nil, err
		}
		if uint64(got) != n {
			return nil, io.ErrUnexpectedEOF
		}
		b = bb.Bytes()
	}
	r.crc.Write(b)
	return b, nil
}

func (r *snapReader) string() (string, error) {
	b, err := r.bytes()
	return string(b), err
}

// readSnapshot parses and validates a snapshot into a fresh store. It
// checks structure as it goes (ordering, revision bounds) and the checksum
// at the end, so a store it returns is one some FSM actually persisted.
//
// builtin classifies untagged keys (Config.Builtin); nil keeps them
// built-in. Keys are checked for order as they are written, before that.
func readSnapshot(rd io.Reader, builtin Builtin) (*store, error) {
	r := &snapReader{r: bufio.NewReaderSize(rd, 64<<10), crc: crc32.New(crcTable)}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrBadSnapshot, fmt.Sprintf(format, args...))
	}
	eof := func(err error) error {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}

	var hdr [len(snapshotMagic) + 1]byte
	if _, err := io.ReadFull(r.r, hdr[:]); err != nil {
		return nil, eof(err)
	}
	r.crc.Write(hdr[:])
	if string(hdr[:len(snapshotMagic)]) != snapshotMagic {
		return nil, bad("wrong magic %q", hdr[:len(snapshotMagic)])
	}
	if v := hdr[len(snapshotMagic)]; v != SnapshotVersion {
		return nil, bad("unknown version %d, and this build reads version %d only (a newer trustplane wrote it: upgrade this node)", v, SnapshotVersion)
	}
	s := newStore()
	var err error
	if s.applied, err = r.uvarint(); err != nil {
		return nil, eof(err)
	}
	if s.compacted, err = r.uvarint(); err != nil {
		return nil, eof(err)
	}
	if s.compacted > s.applied {
		return nil, bad("compacted revision %d beyond applied index %d", s.compacted, s.applied)
	}
	nkeys, err := r.uvarint()
	if err != nil {
		return nil, eof(err)
	}
	var prev string
	for i := uint64(0); i < nkeys; i++ {
		var k Key
		var group string
		for _, f := range []*string{&group, &k.Resource, &k.Namespace, &k.Name} {
			if *f, err = r.string(); err != nil {
				return nil, eof(err)
			}
		}
		k.Space, k.Group = splitWireGroup(group)
		ks := k.String()
		if i > 0 && ks <= prev {
			return nil, bad("key %q out of order", ks)
		}
		prev = ks
		builtin.classify(&k)
		ks = k.String()
		nv, err := r.uvarint()
		if err != nil {
			return nil, eof(err)
		}
		if nv == 0 {
			return nil, bad("key %q has no versions", ks)
		}
		vs := make([]version, 0, min(nv, 1024))
		var last uint64
		for j := uint64(0); j < nv; j++ {
			kind, err := r.ReadByte()
			if err != nil {
				return nil, eof(err)
			}
			rev, err := r.uvarint()
			if err != nil {
				return nil, eof(err)
			}
			if rev <= last || rev > s.applied {
				return nil, bad("key %q: revision %d out of order or beyond %d", ks, rev, s.applied)
			}
			last = rev
			switch kind {
			case kindTombstone:
				// A delete needs a live object, so a tombstone always
				// follows a live version (compaction drops leading ones).
				if len(vs) == 0 || vs[len(vs)-1].kv == nil {
					return nil, bad("key %q: tombstone at %d does not follow a live version", ks, rev)
				}
				vs = append(vs, version{rev: rev})
			case kindLive:
				kv := &KV{Key: k, ModRevision: rev}
				if kv.CreateRevision, err = r.uvarint(); err != nil {
					return nil, eof(err)
				}
				if kv.CreateRevision == 0 || kv.CreateRevision > rev {
					return nil, bad("key %q: create revision %d after mod revision %d", ks, kv.CreateRevision, rev)
				}
				if kv.UID, err = r.string(); err != nil {
					return nil, eof(err)
				}
				if kv.Value, err = r.bytes(); err != nil {
					return nil, eof(err)
				}
				vs = append(vs, version{rev: rev, kv: kv})
			default:
				return nil, bad("key %q: unknown version kind %d", ks, kind)
			}
		}
		e := entry{key: ks, versions: vs[:len(vs):len(vs)]}
		if had, ok := s.tree.Get(e); ok {
			// Two keys of the snapshot classify as one: a custom object an
			// earlier build kept untagged, beside the same object a newer
			// leader wrote in the custom space while both builds ran (a
			// rolling upgrade). The newer history is the object's.
			if had.versions[len(had.versions)-1].rev > vs[len(vs)-1].rev {
				continue
			}
			s.history -= had.supersededBytes(len(had.versions))
		}
		s.history += e.supersededBytes(len(vs))
		s.tree.ReplaceOrInsert(e)
	}
	sum := r.crc.Sum32()
	var trailer [4]byte
	if _, err := io.ReadFull(r.r, trailer[:]); err != nil {
		return nil, eof(err)
	}
	if got := binary.BigEndian.Uint32(trailer[:]); got != sum {
		return nil, bad("checksum %08x, want %08x", got, sum)
	}
	if _, err := r.r.ReadByte(); err != io.EOF {
		return nil, bad("trailing data after checksum")
	}
	return s, nil
}
