package fsm

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

var roundTripCommands = []struct {
	name string
	cmd  Command
}{
	{"put with every field", Command{
		Op:           OpPut,
		Key:          Key{Group: "certificates.k8s.io", Resource: "certificatesigningrequests", Name: "csr-1"},
		Value:        []byte{0, 1, 2, 0xff},
		UID:          "11111111-2222",
		MustNotExist: true,
		ModRevision:  1 << 40,
		MatchUID:     "match",
	}},
	{"put minimal", Command{Op: OpPut, Key: pod("ns", "a"), Value: []byte("v")}},
	{"put with empty value", Command{Op: OpPut, Key: pod("ns", "a")}},
	{"delete with preconditions", Command{Op: OpDelete, Key: pod("ns", "a"), ModRevision: 7, MatchUID: "u"}},
	{"compact", Command{Op: OpCompact, CompactRevision: 123456789}},
	{"noop", Command{Op: OpNoop}},
	{"large value", Command{Op: OpPut, Key: pod("ns", "big"), Value: bytes.Repeat([]byte("x"), 100000)}},
}

func TestCommandRoundTrip(t *testing.T) {
	for _, tc := range roundTripCommands {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.cmd.Encode()
			if b[0] != CommandVersion {
				t.Fatalf("first byte %d, want CommandVersion", b[0])
			}
			got, err := DecodeCommand(b)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(*got, tc.cmd) {
				t.Fatalf("round trip:\n got %+v\nwant %+v", *got, tc.cmd)
			}
			if !bytes.Equal(got.Encode(), b) {
				t.Fatal("re-encoding differs")
			}
		})
	}
}

func TestDecodeCommandValueDoesNotAliasInput(t *testing.T) {
	b := (&Command{Op: OpPut, Key: pod("ns", "a"), Value: []byte("hello")}).Encode()
	c, err := DecodeCommand(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0
	}
	if string(c.Value) != "hello" {
		t.Fatalf("Value changed with the input buffer: %q", c.Value)
	}
}

func TestDecodeCommandRejectsGarbage(t *testing.T) {
	valid := roundTripCommands[0].cmd.Encode()
	cases := []struct {
		name string
		in   []byte
	}{
		{"nil", nil},
		{"empty", []byte{}},
		{"version only", []byte{CommandVersion}},
		{"unknown version 0", append([]byte{0}, valid[1:]...)},
		{"unknown version 2", append([]byte{2}, valid[1:]...)},
		{"unknown op 0", []byte{CommandVersion, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"unknown op 5", []byte{CommandVersion, 5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"unknown flag bit", []byte{CommandVersion, byte(OpNoop), 0, 0, 0, 0, 0, 0, 2, 0, 0, 0}},
		{"trailing byte", append(append([]byte{}, valid...), 0)},
		{"length overruns input", []byte{CommandVersion, byte(OpPut), 0xff, 0xff, 0xff, 0xff, 0x0f}},
		{"non-minimal uvarint", []byte{CommandVersion, byte(OpNoop), 0x80, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"overlong uvarint", []byte{CommandVersion, byte(OpNoop), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
		{"text", []byte("{\"op\":\"put\"}")},
	}
	// Every proper prefix of a valid encoding is truncated.
	for i := 0; i < len(valid); i++ {
		cases = append(cases, struct {
			name string
			in   []byte
		}{"truncated", valid[:i]})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := DecodeCommand(tc.in)
			if !errors.Is(err, ErrUnknownCommand) {
				t.Fatalf("DecodeCommand(%x) = %+v, %v; want ErrUnknownCommand", tc.in, c, err)
			}
			if c != nil {
				t.Fatal("non-nil command with error")
			}
		})
	}
}

func FuzzDecodeCommand(f *testing.F) {
	for _, tc := range roundTripCommands {
		f.Add(tc.cmd.Encode())
	}
	f.Add([]byte{})
	f.Add([]byte{CommandVersion, byte(OpPut), 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b)
		if err != nil {
			if !errors.Is(err, ErrUnknownCommand) {
				t.Fatalf("error %v does not wrap ErrUnknownCommand", err)
			}
			return
		}
		// Whatever decodes must re-encode to the same bytes: the encoding
		// has exactly one form per command.
		if !bytes.Equal(c.Encode(), b) {
			t.Fatalf("re-encoding of %x differs: %x", b, c.Encode())
		}
	})
}
