package fsm

import (
	"fmt"
	"testing"

	"github.com/hashicorp/raft"
)

// BenchmarkApplyPut measures the apply path: one ApplyBatch of 64 puts
// (decode, preconditions, MVCC insert, events, one listener call) per
// iteration, over a working set of 4096 keys. ns/op is per batch.
func BenchmarkApplyPut(b *testing.B) {
	const batch, keys = 64, 4096
	f := New()
	f.Subscribe(&discard{})
	value := make([]byte, 512)
	data := make([][]byte, keys)
	for i := range data {
		data[i] = (&Command{Op: OpPut, Key: pod(fmt.Sprintf("ns-%d", i%16), fmt.Sprintf("pod-%05d", i)), Value: value, UID: "uid"}).Encode()
	}
	logs := make([]*raft.Log, batch)
	for i := range logs {
		logs[i] = &raft.Log{Type: raft.LogCommand}
	}
	idx, n := uint64(0), 0
	const compactEvery = keys / batch // batches
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range logs {
			idx++
			logs[j].Index = idx
			logs[j].Data = data[n%keys]
			n++
		}
		f.ApplyBatch(logs)
		if (i+1)%compactEvery == 0 { // keep history bounded, as the cluster would
			idx++
			f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: (&Command{Op: OpCompact, CompactRevision: idx - 1}).Encode()})
		}
	}
}

// BenchmarkGet measures a latest-revision point read over 10k keys.
func BenchmarkGet(b *testing.B) {
	const keys = 10000
	f := New()
	ks := make([]Key, keys)
	logs := make([]*raft.Log, keys)
	for i := range ks {
		ks[i] = pod(fmt.Sprintf("ns-%d", i%16), fmt.Sprintf("pod-%05d", i))
		logs[i] = cmdLog(uint64(i+1), &Command{Op: OpPut, Key: ks[i], Value: make([]byte, 512)})
	}
	f.ApplyBatch(logs)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			kv, _, err := f.Get(ks[i%keys], 0)
			if kv == nil || err != nil {
				b.Fatal("missing key")
			}
			i += 7
		}
	})
}

type discard struct{}

func (discard) OnApply([]Event) {}
func (discard) OnIndex(uint64)  {}
