package cluster

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Version 2 of the internal RPC adds one binary frame, for proposals
// (opPropose) and their answers, the one request a follower executing
// writes sends per write. In JSON each command is base64 in a string and
// every frame goes through reflection both ways; these frames are the
// commands' own bytes behind a length. Every other request, and every
// answer that carries an error, stays JSON (version 1), which every build
// reads.
//
//	request:  byte 2 · uvarint timeout_ms · uvarint n · n × bytes(command)
//	answer:   byte 2 · uvarint n · n × (uvarint index · string result · string code · string err)
//
// where bytes and string are a uvarint length and that many bytes. A JSON
// frame starts with '{', so the first byte tells the two apart, and a
// build that reads version 1 only answers a binary frame bad_request
// before it acts on anything (its JSON decoder fails): the sender then
// sends the same proposals as version 1 (proposeBatch). A node sends one
// only once every member reads version 2 (formats.go).

// rpcBinary is the first byte of a version 2 binary frame.
const rpcBinary byte = 2

// errBadFrame: a binary frame that does not parse.
var errBadFrame = errors.New("malformed binary frame")

// appendProposeRequest appends the binary frame of a proposal request.
func appendProposeRequest(b []byte, timeoutMS int64, cmds [][]byte) []byte {
	b = append(b, rpcBinary)
	b = binary.AppendUvarint(b, uint64(max(timeoutMS, 0)))
	b = binary.AppendUvarint(b, uint64(len(cmds)))
	for _, c := range cmds {
		b = binary.AppendUvarint(b, uint64(len(c)))
		b = append(b, c...)
	}
	return b
}

// parseProposeRequest reads a binary proposal request. The commands alias
// b, which the caller does not reuse. It never trusts a count or a length
// it has not checked against what is left of b.
func parseProposeRequest(b []byte) (rpcRequest, error) {
	r := frameReader{b: b, off: 1}
	req := rpcRequest{V: 2, Op: opPropose}
	req.TimeoutMS = int64(min(r.uvarint(), 1<<40))
	n := r.uvarint()
	// Bounded before anything is allocated for it: a frame of 32 MiB
	// could otherwise count 32 million empty commands, and their slice
	// would be 24 times the frame.
	if n > maxBatchCommands || n > uint64(len(b)) {
		return rpcRequest{}, fmt.Errorf("%w: %d commands in %d bytes (at most %d in a frame)", errBadFrame, n, len(b), maxBatchCommands)
	}
	req.Commands = make([][]byte, 0, n)
	for i := uint64(0); i < n && r.err == nil; i++ {
		req.Commands = append(req.Commands, r.bytes())
	}
	return req, r.done()
}

// appendProposeAnswer appends the binary frame of a proposal answer.
func appendProposeAnswer(b []byte, results []proposalResult) []byte {
	b = append(b, rpcBinary)
	b = binary.AppendUvarint(b, uint64(len(results)))
	for _, p := range results {
		b = binary.AppendUvarint(b, p.Index)
		for _, s := range [...]string{p.Result, p.Code, p.Err} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
	}
	return b
}

// parseProposeAnswer reads a binary proposal answer.
func parseProposeAnswer(b []byte) (rpcResponse, error) {
	r := frameReader{b: b, off: 1}
	n := r.uvarint()
	if n > maxBatchCommands || n > uint64(len(b))/4 { // each result takes at least four bytes
		return rpcResponse{}, fmt.Errorf("%w: %d results in %d bytes (at most %d in a frame)", errBadFrame, n, len(b), maxBatchCommands)
	}
	resp := rpcResponse{Proposals: make([]proposalResult, 0, n)}
	for i := uint64(0); i < n && r.err == nil; i++ {
		p := proposalResult{Index: r.uvarint()}
		p.Result, p.Code, p.Err = string(r.bytes()), string(r.bytes()), string(r.bytes())
		resp.Proposals = append(resp.Proposals, p)
	}
	return resp, r.done()
}

// frameReader reads a binary frame's fields; the first failure sticks.
type frameReader struct {
	b   []byte
	off int
	err error
}

func (r *frameReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.err = fmt.Errorf("%w: bad uvarint at offset %d", errBadFrame, r.off)
		return 0
	}
	r.off += n
	return v
}

func (r *frameReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		r.err = fmt.Errorf("%w: length %d at offset %d overruns %d bytes", errBadFrame, n, r.off, len(r.b))
		return nil
	}
	v := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return v
}

// done is the frame's verdict: the first failure, or trailing bytes.
func (r *frameReader) done() error {
	if r.err == nil && r.off != len(r.b) {
		r.err = fmt.Errorf("%w: %d trailing bytes", errBadFrame, len(r.b)-r.off)
	}
	return r.err
}
