package backup

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/trustplane/trustplane/fsm"
)

// Sentinel errors. Every refusal of a file wraps exactly one of them.
var (
	// ErrNotBackup: the file does not start with the backup magic; it is
	// something else (a raft snapshot, a kubeconfig, an empty file).
	ErrNotBackup = errors.New("backup: not a trustplane snapshot file")
	// ErrUnsupportedVersion: the file is a backup in a format version this
	// binary does not read (written by a newer trustplane).
	ErrUnsupportedVersion = errors.New("backup: unsupported snapshot format version")
	// ErrTruncated: the file ends before its end marker: the save was cut
	// short, or the file was copied incompletely.
	ErrTruncated = errors.New("backup: snapshot file is truncated")
	// ErrChecksum: the SHA-256 in the trailer does not match the bytes
	// before it: the file was changed or damaged after it was written.
	ErrChecksum = errors.New("backup: snapshot checksum mismatch")
	// ErrCorrupt: the checksum matches but the content is inconsistent (a
	// bad header, a state that does not parse or disagrees with the
	// header). Such a file was written wrongly; it cannot be restored.
	ErrCorrupt = errors.New("backup: snapshot file is corrupt")
)

const (
	// FormatVersion is the file format this binary writes and reads.
	FormatVersion = 1

	magic    = "TPBACKUP"
	endMagic = "TPBKEND\n"
	// maxHeader bounds the JSON header, so garbage cannot make Open
	// allocate much.
	maxHeader = 64 << 10

	// prefixLen is magic, version and header length; trailerLen the
	// state's length, the SHA-256 and the end magic (untyped, to mix with
	// int and int64 sizes).
	prefixLen  = 8 + 4 + 4
	trailerLen = 8 + sha256.Size + 8
)

// Header is the metadata a backup carries beside the state.
type Header struct {
	// Index is the raft log index the state was taken at: the source's
	// applied index, so at least every resourceVersion in the state. A
	// restored cluster continues its log after it, so every later write's
	// resourceVersion is larger.
	Index uint64 `json:"index"`
	// Term is the source's raft term when the state was taken, at least
	// the term of the entry at Index. A restored node starts at this term.
	Term uint64 `json:"term"`
	// Node is the name of the node that served the snapshot.
	Node string `json:"node,omitempty"`
	// ClusterID identifies the source cluster (the hex SHA-256 of its
	// cluster CA certificate), when it runs with gossip.
	ClusterID string `json:"clusterID,omitempty"`
	// ServerVersion is the trustplane release of the serving node (package
	// trustplane's Version: "v0.1.0", with the commit as build metadata;
	// builds before VERSION wrote the Kubernetes level, "v1.33.13+trustplane").
	ServerVersion string `json:"serverVersion,omitempty"`
	// Created is when the state was taken, by the serving node's clock.
	// Informational only: nothing orders backups by it.
	Created time.Time `json:"created"`
}

// Write writes a backup of the state state writes (fsm.Export.WriteTo)
// with header h to w, hashing as it goes. It never buffers the state. An
// error leaves w with a partial file that Open refuses as truncated.
func Write(w io.Writer, h Header, state func(io.Writer) error) error {
	hdr, err := json.Marshal(h)
	if err != nil {
		return fmt.Errorf("backup: encode header: %w", err)
	}
	if len(hdr) > maxHeader {
		return fmt.Errorf("backup: header of %d bytes exceeds %d", len(hdr), maxHeader)
	}
	sum := sha256.New()
	hw := &hashWriter{w: w, h: sum}
	pre := make([]byte, 0, prefixLen+len(hdr))
	pre = append(pre, magic...)
	pre = binary.BigEndian.AppendUint32(pre, FormatVersion)
	pre = binary.BigEndian.AppendUint32(pre, uint32(len(hdr)))
	pre = append(pre, hdr...)
	if _, err := hw.Write(pre); err != nil {
		return fmt.Errorf("backup: write header: %w", err)
	}
	start := hw.n
	if err := state(hw); err != nil {
		return fmt.Errorf("backup: write state: %w", err)
	}
	trailer := binary.BigEndian.AppendUint64(nil, uint64(hw.n-start))
	if _, err := hw.Write(trailer); err != nil {
		return fmt.Errorf("backup: write trailer: %w", err)
	}
	trailer = append(sum.Sum(nil), endMagic...)
	if _, err := w.Write(trailer); err != nil {
		return fmt.Errorf("backup: write trailer: %w", err)
	}
	return nil
}

type hashWriter struct {
	w io.Writer
	h hash.Hash
	n int64
}

func (w *hashWriter) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	w.h.Write(p[:n])
	w.n += int64(n)
	return n, err
}

// File is a verified backup file: its checksum matched and its header
// parsed. Its state is parsed only by Load.
type File struct {
	Header Header
	// Size is the file's size in bytes; StateSize that of the state in it.
	Size, StateSize int64

	r          io.ReaderAt
	stateStart int64
}

// Open reads the backup file at path into memory and verifies it (see
// Read). A backup is about the size of the state every node holds in
// memory anyway, and reading it once means Load parses exactly the bytes
// that were verified, even if the file changes meanwhile.
func Open(path string) (*File, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(fh, st.Size()))
	if err != nil {
		return nil, fmt.Errorf("backup: read %s: %w", path, err)
	}
	return Read(bytes.NewReader(b), int64(len(b)))
}

// Read verifies a backup of size bytes readable from r: magic, version,
// end marker, then the SHA-256 over everything before the digest, then
// the header and the state's length. It reads r twice at most and keeps
// it for Load.
func Read(r io.ReaderAt, size int64) (*File, error) {
	pre := make([]byte, prefixLen)
	n, err := r.ReadAt(pre, 0)
	if n < len(magic) || string(pre[:len(magic)]) != magic {
		if n < len(magic) && bytes.HasPrefix([]byte(magic), pre[:n]) && n > 0 {
			return nil, fmt.Errorf("%w: %d bytes", ErrTruncated, size)
		}
		return nil, ErrNotBackup
	}
	if n < prefixLen {
		return nil, fmt.Errorf("%w: %d bytes (read error: %v)", ErrTruncated, size, err)
	}
	if v := binary.BigEndian.Uint32(pre[len(magic):]); v != FormatVersion {
		return nil, fmt.Errorf("%w: %d (this binary reads %d)", ErrUnsupportedVersion, v, FormatVersion)
	}
	hlen := int64(binary.BigEndian.Uint32(pre[len(magic)+4:]))
	if size < int64(prefixLen)+trailerLen {
		return nil, fmt.Errorf("%w: %d bytes", ErrTruncated, size)
	}
	end := make([]byte, trailerLen)
	if _, err := r.ReadAt(end, size-trailerLen); err != nil {
		return nil, fmt.Errorf("backup: read trailer: %w", err)
	}
	if string(end[8+sha256.Size:]) != endMagic {
		return nil, fmt.Errorf("%w: no end marker in the last bytes of %d", ErrTruncated, size)
	}
	sum := sha256.New()
	if _, err := io.Copy(sum, io.NewSectionReader(r, 0, size-sha256.Size-int64(len(endMagic)))); err != nil {
		return nil, fmt.Errorf("backup: read: %w", err)
	}
	if got, want := sum.Sum(nil), end[8:8+sha256.Size]; !bytes.Equal(got, want) {
		return nil, fmt.Errorf("%w: sha256 %x, trailer says %x", ErrChecksum, got, want)
	}
	// The bytes are as written; what follows checks that they were
	// written right.
	if hlen > maxHeader || int64(prefixLen)+hlen > size-trailerLen {
		return nil, fmt.Errorf("%w: header length %d", ErrCorrupt, hlen)
	}
	hdr := make([]byte, hlen)
	if _, err := r.ReadAt(hdr, prefixLen); err != nil {
		return nil, fmt.Errorf("backup: read header: %w", err)
	}
	f := &File{Size: size, r: r, stateStart: int64(prefixLen) + hlen}
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f.Header); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	f.StateSize = size - trailerLen - f.stateStart
	if got := binary.BigEndian.Uint64(end[:8]); got != uint64(f.StateSize) {
		return nil, fmt.Errorf("%w: state length %d in the trailer, %d in the file", ErrCorrupt, got, f.StateSize)
	}
	if f.Header.Index == 0 {
		return nil, fmt.Errorf("%w: header has no index", ErrCorrupt)
	}
	return f, nil
}

// State is the state's bytes, in the fsm snapshot format.
func (f *File) State() io.Reader { return io.NewSectionReader(f.r, f.stateStart, f.StateSize) }

// Load parses and verifies the state (fsm.ReadExport) and checks that it
// was taken at the header's Index.
func (f *File) Load() (*fsm.Export, error) {
	exp, err := fsm.ReadExport(f.State())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if exp.Index() != f.Header.Index {
		return nil, fmt.Errorf("%w: state taken at index %d, header says %d", ErrCorrupt, exp.Index(), f.Header.Index)
	}
	return exp, nil
}

// Summary is what inspect prints about a state.
type Summary struct {
	// Objects counts the live objects by group/resource ("configmaps",
	// "certificates.k8s.io/certificatesigningrequests").
	Objects map[string]int
	// MaxRevision is the largest ModRevision of a live object (0 if none):
	// the highest resourceVersion a restored cluster serves.
	MaxRevision uint64
	// Versions is the number of retained versions, history included.
	Versions int
	// Encrypted counts the live values stored encrypted at rest, by the
	// kube EncryptionConfiguration prefix they carry ("k8s:enc:aescbc:v1:key1").
	// A cluster restored from the file needs a configuration with those keys.
	Encrypted map[string]int
}

// encPrefix starts every value kube's EncryptionConfiguration transformers
// wrote: k8s:enc:<provider>:v1:<key name>:<ciphertext>.
const encPrefix = "k8s:enc:"

// Summarize counts what a state holds.
func Summarize(exp *fsm.Export) Summary {
	s := Summary{Objects: map[string]int{}, Encrypted: map[string]int{}, Versions: exp.Versions()}
	exp.Live(func(kv *fsm.KV) bool {
		// Keys as their space writes them: custom/<group>/<plural> for
		// custom resources, trustplane.internal/<kind> for internal records.
		r := kv.Key.Resource
		if g := (fsm.Prefix{Space: kv.Key.Space, Group: kv.Key.Group}).WireGroup(); g != "" {
			r = g + "/" + r
		}
		s.Objects[r]++
		s.MaxRevision = max(s.MaxRevision, kv.ModRevision)
		if p, ok := encryptionPrefix(kv.Value); ok {
			s.Encrypted[p]++
		}
		return true
	})
	return s
}

// encryptionPrefix returns "k8s:enc:<provider>:v1:<key>" for a value an
// EncryptionConfiguration transformer wrote. It never looks past the key
// name, so no ciphertext is ever printed.
func encryptionPrefix(v []byte) (string, bool) {
	if !bytes.HasPrefix(v, []byte(encPrefix)) {
		return "", false
	}
	// provider, "v1", key name: three more colon-terminated fields.
	rest := v[len(encPrefix):]
	end := 0
	for range 3 {
		i := bytes.IndexByte(rest[end:], ':')
		if i < 0 || i > 256 {
			return encPrefix + "?", true
		}
		end += i + 1
	}
	return encPrefix + string(rest[:end-1]), true
}

// Resources returns s.Objects' keys sorted, for stable output.
func (s Summary) Resources() []string {
	out := make([]string, 0, len(s.Objects))
	for r := range s.Objects {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// EncryptionKeys returns s.Encrypted's keys sorted.
func (s Summary) EncryptionKeys() []string {
	out := make([]string, 0, len(s.Encrypted))
	for p := range s.Encrypted {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// String is a one-line description for logs.
func (h Header) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "index %d, term %d", h.Index, h.Term)
	if h.Node != "" {
		fmt.Fprintf(&b, ", from node %s", h.Node)
	}
	if !h.Created.IsZero() {
		fmt.Fprintf(&b, ", taken %s", h.Created.UTC().Format(time.RFC3339))
	}
	return b.String()
}
