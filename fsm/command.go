package fsm

import (
	"encoding/binary"
	"fmt"
)

// Command wire format, version 1 (every field always present, in this order):
//
//	byte     CommandVersion
//	byte     Op
//	string   Key.Group, as Key.Space writes it (keyspace.go)
//	string   Key.Resource
//	string   Key.Namespace
//	string   Key.Name
//	bytes    Value
//	string   UID
//	byte     flags (bit 0: MustNotExist; other bits must be zero)
//	uvarint  ModRevision
//	string   MatchUID
//	uvarint  CompactRevision
//
// where string and bytes are a uvarint length followed by that many bytes,
// and every uvarint is minimally encoded, so each Command has one encoding.
// Nothing may follow the last field. A later version may add fields or
// reorder them; it must bump CommandVersion, and this decoder keeps
// rejecting what it does not know rather than guessing.

// flagMustNotExist is bit 0 of the flags byte.
const flagMustNotExist = 1 << 0

// Encode is how a proposer turns a Command into a Raft log entry. The
// encoding is a pure function of the fields, so two nodes that encode the
// same Command produce the same bytes, and it is cheap enough to run on every
// write without reflection.
func (c *Command) Encode() []byte {
	group := wireGroup(c.Key.Space, c.Key.Group)
	n := 2 + 1 +
		strLen(len(group)) + strLen(len(c.Key.Resource)) +
		strLen(len(c.Key.Namespace)) + strLen(len(c.Key.Name)) +
		strLen(len(c.Value)) + strLen(len(c.UID)) +
		uvarintLen(c.ModRevision) + strLen(len(c.MatchUID)) +
		uvarintLen(c.CompactRevision)
	b := make([]byte, 0, n)
	b = append(b, CommandVersion, byte(c.Op))
	b = appendString(b, group)
	b = appendString(b, c.Key.Resource)
	b = appendString(b, c.Key.Namespace)
	b = appendString(b, c.Key.Name)
	b = binary.AppendUvarint(b, uint64(len(c.Value)))
	b = append(b, c.Value...)
	b = appendString(b, c.UID)
	var flags byte
	if c.MustNotExist {
		flags |= flagMustNotExist
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, c.ModRevision)
	b = appendString(b, c.MatchUID)
	b = binary.AppendUvarint(b, c.CompactRevision)
	return b
}

// DecodeCommand is the only way a log entry becomes a Command. It never
// panics and never trusts a length it has not checked against the input, so
// garbage costs an error rather than a crash or a huge allocation; every
// failure wraps ErrUnknownCommand. The returned Command does not alias b
// (Value is copied), because the store keeps it for as long as the object
// lives and the caller may reuse its buffer.
func DecodeCommand(b []byte) (*Command, error) {
	d := decoder{b: b}
	if len(b) < 2 {
		return nil, fmt.Errorf("%w: %d bytes is too short", ErrUnknownCommand, len(b))
	}
	if b[0] != CommandVersion {
		return nil, fmt.Errorf("%w: version %d, and this build reads version %d only (a newer trustplane wrote it: upgrade this node)", ErrUnknownCommand, b[0], CommandVersion)
	}
	op := Op(b[1])
	if op < OpPut || op > OpNoop {
		return nil, fmt.Errorf("%w: op %d", ErrUnknownCommand, b[1])
	}
	d.off = 2
	c := &Command{Op: op}
	c.Key.Space, c.Key.Group = splitWireGroup(d.string())
	c.Key.Resource = d.string()
	c.Key.Namespace = d.string()
	c.Key.Name = d.string()
	if v := d.bytes(); len(v) > 0 {
		c.Value = append([]byte(nil), v...)
	}
	c.UID = d.string()
	flags := d.byte()
	if flags&^flagMustNotExist != 0 && d.err == nil {
		d.err = fmt.Errorf("unknown flags %#x", flags)
	}
	c.MustNotExist = flags&flagMustNotExist != 0
	c.ModRevision = d.uvarint()
	c.MatchUID = d.string()
	c.CompactRevision = d.uvarint()
	if d.err == nil && d.off != len(b) {
		d.err = fmt.Errorf("%d trailing bytes", len(b)-d.off)
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnknownCommand, d.err)
	}
	return c, nil
}

func (o Op) String() string {
	switch o {
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpCompact:
		return "compact"
	case OpNoop:
		return "noop"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func strLen(n int) int { return uvarintLen(uint64(n)) + n }

// decoder reads the command fields; the first failure sticks in err and
// every later read returns a zero value, so the caller checks once.
type decoder struct {
	b   []byte
	off int
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 || n != uvarintLen(v) {
		// Non-minimal encodings are rejected too: one command, one encoding.
		d.err = fmt.Errorf("bad uvarint at offset %d", d.off)
		return 0
	}
	d.off += n
	return v
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.err = fmt.Errorf("truncated at offset %d", d.off)
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

// bytes returns a sub-slice of the input; callers copy what they keep.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.err = fmt.Errorf("length %d at offset %d overruns %d bytes", n, d.off, len(d.b))
		return nil
	}
	v := d.b[d.off : d.off+int(n)]
	d.off += int(n)
	return v
}

func (d *decoder) string() string {
	return string(d.bytes())
}
