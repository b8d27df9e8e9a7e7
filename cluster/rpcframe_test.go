package cluster

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// TestProposeFrames: binary proposal frames read back as they were
// written, and a frame that is cut short, overlong or padded is refused.
func TestProposeFrames(t *testing.T) {
	cmds := [][]byte{putCmd("a", "1").Encode(), {0x01}, bytes.Repeat([]byte{7}, 300)}
	req, err := parseProposeRequest(appendProposeRequest(nil, 1500, cmds))
	if err != nil || req.V != 2 || req.Op != opPropose || req.TimeoutMS != 1500 || !reflect.DeepEqual(req.Commands, cmds) {
		t.Fatalf("request read back as %+v, %v", req, err)
	}
	results := []proposalResult{{Index: 7}, {Index: 1 << 40, Result: "mod_revision"}, {Code: "not_permitted", Err: "a node may not submit a write of an internal record"}}
	resp, err := parseProposeAnswer(appendProposeAnswer(nil, results))
	if err != nil || !reflect.DeepEqual(resp.Proposals, results) {
		t.Fatalf("answer read back as %+v, %v", resp, err)
	}
	whole := appendProposeRequest(nil, 10, cmds)
	answer := appendProposeAnswer(nil, results)
	for name, b := range map[string][]byte{
		"a request cut short":     whole[:len(whole)-1],
		"a request with padding":  append(bytes.Clone(whole), 0),
		"a request's bad varint":  {rpcBinary, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"a request counting more": {rpcBinary, 1, 0xff, 0xff, 0x03, 1, 9},
		"an answer cut short":     answer[:len(answer)-3],
		"an answer counting more": {rpcBinary, 0xff, 0x7f, 0, 0, 0, 0},
	} {
		var err error
		if name[:2] == "a " {
			_, err = parseProposeRequest(b)
		} else {
			_, err = parseProposeAnswer(b)
		}
		if !errors.Is(err, errBadFrame) {
			t.Errorf("%s: %v, want errBadFrame", name, err)
		}
	}
}

// FuzzProposeFrames: no input makes the readers panic or allocate beyond
// what it holds, and what they accept writes back in no more bytes.
func FuzzProposeFrames(f *testing.F) {
	f.Add(appendProposeRequest(nil, 10, [][]byte{putCmd("a", "1").Encode()}))
	f.Add(appendProposeAnswer(nil, []proposalResult{{Index: 3, Result: "exists"}}))
	f.Add([]byte{rpcBinary, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		if req, err := parseProposeRequest(b); err == nil {
			if again := appendProposeRequest(nil, req.TimeoutMS, req.Commands); len(again) > len(b) {
				t.Fatalf("a request of %d bytes wrote back as %d", len(b), len(again))
			}
		}
		if resp, err := parseProposeAnswer(b); err == nil {
			if again := appendProposeAnswer(nil, resp.Proposals); len(again) > len(b) {
				t.Fatalf("an answer of %d bytes wrote back as %d", len(b), len(again))
			}
		}
	})
}
