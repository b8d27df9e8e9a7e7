package cluster

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"reflect"
	"runtime"
	"testing"
)

// TestProposeFrames: binary proposal frames read back as they were
// written, and a frame that is cut short, overlong or padded is refused.
func TestProposeFrames(t *testing.T) {
	cmds := [][]byte{putCmd("a", "1").Encode(), {0x01}, bytes.Repeat([]byte{7}, 300)}
	req, err := parseProposeRequest(appendProposeRequest(nil, 1500, cmds))
	if err != nil || req.V != 2 || req.Op != opPropose || req.TimeoutMS != 1500 || !reflect.DeepEqual([][]byte(req.Commands), cmds) {
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

// allocated is how many bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestFramesAllocateWhatTheyHold: no count or length a peer sends makes a
// node allocate ahead of the bytes that back it (the red team's 32 MiB
// frame of 33 million empty commands allocated 768 MiB before the count
// was checked). A frame's count is bounded by maxBatchCommands before
// anything is made for it, in binary and in JSON, and a frame's buffer
// grows as its bytes arrive.
func TestFramesAllocateWhatTheyHold(t *testing.T) {
	const frameBytes = 32 << 20
	const bound = 4 << 20 // what each case may allocate at most
	empties := append(binary.AppendUvarint([]byte{rpcBinary, 10}, frameBytes-8), make([]byte, frameBytes-8)...)
	jsonEmpties := append([]byte(`{"op":"propose","commands":[`), bytes.Repeat([]byte(`"",`), frameBytes/3)...)
	jsonEmpties = append(jsonEmpties[:len(jsonEmpties)-1], "]}"...)
	tooMany := appendProposeRequest(nil, 10, make([][]byte, maxBatchCommands+1))
	manyResults := append(binary.AppendUvarint([]byte{rpcBinary}, 1<<20), make([]byte, 4<<20)...)
	cases := []struct {
		name string
		run  func() error
	}{
		{"a binary frame counting 33 million empty commands", func() error { _, err := parseProposeRequest(empties); return err }},
		{"a binary frame of 129 commands", func() error { _, err := parseProposeRequest(tooMany); return err }},
		{"an answer counting a million results", func() error { _, err := parseProposeAnswer(manyResults); return err }},
		{"a JSON frame of 11 million empty commands", func() error { var req rpcRequest; return unmarshalFrame(jsonEmpties, &req) }},
		{"a frame's length and nothing after it", func() error {
			_, err := readFrameBytes(bytes.NewReader(binary.BigEndian.AppendUint32(nil, frameBytes)), rpcMaxRequestFrame)
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if got := allocated(func() { err = tc.run() }); got > bound {
				t.Errorf("allocated %d MiB, want at most %d", got>>20, bound>>20)
			}
			if err == nil {
				t.Error("accepted")
			}
		})
	}
	// A frame that does hold its bytes is read whole.
	payload := bytes.Repeat([]byte{7}, 3<<20+5)
	got, err := readFrameBytes(bytes.NewReader(append(binary.BigEndian.AppendUint32(nil, uint32(len(payload))), payload...)), rpcMaxRequestFrame)
	if err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("a whole frame read back as %d bytes, %v", len(got), err)
	}
	var req rpcRequest
	cmds := [][]byte{{1}, {2, 3}}
	body, _ := json.Marshal(rpcRequest{Op: opPropose, Commands: cmds})
	if err := unmarshalFrame(body, &req); err != nil || !reflect.DeepEqual([][]byte(req.Commands), cmds) {
		t.Fatalf("a JSON proposal read back as %+v, %v", req, err)
	}
}
