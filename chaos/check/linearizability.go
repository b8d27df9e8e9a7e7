package check

import (
	"fmt"
	"hash/fnv"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/trustplane/trustplane/chaos/history"
)

// regState is one key's state in the model: a register with a
// resourceVersion.
type regState struct {
	exists bool
	value  string
	// rv is the object's RV when exact, else a lower bound: after a delete,
	// or after an Unknown write that was applied at an RV nobody saw.
	rv    uint64
	exact bool
}

// regInput is one operation on a key.
type regInput struct {
	id       int64
	kind     history.Kind // Create, Update, Delete or Get
	key      string
	value    string
	expectRV uint64
	// unknown: the write may or may not have happened.
	unknown bool
}

// regOutput is its answer: the write's RV (0 when not known), or what a
// get saw.
type regOutput struct {
	rv     uint64
	exists bool
	value  string
}

// apply is the state after the write in applied to s, or false when the
// write could not have succeeded from s.
func apply(s regState, in regInput, out regOutput) (regState, bool) {
	if out.rv != 0 && out.rv <= s.rv {
		return s, false // RVs only grow
	}
	switch in.kind {
	case history.Create:
		if s.exists {
			return s, false
		}
		return regState{exists: true, value: in.value, rv: max(s.rv, out.rv), exact: out.rv != 0}, true
	case history.Update, history.Delete:
		if !s.exists || (in.expectRV != 0 && (!s.exact || s.rv != in.expectRV)) {
			return s, false
		}
		if in.kind == history.Delete {
			return regState{rv: max(s.rv, out.rv)}, true
		}
		return regState{exists: true, value: in.value, rv: max(s.rv, out.rv), exact: out.rv != 0}, true
	}
	return s, false
}

func regStep(state, input, output any) []any {
	s, in, out := state.(regState), input.(regInput), output.(regOutput)
	if in.kind == history.Get {
		if !out.exists && !s.exists {
			return []any{s}
		}
		if out.exists && s.exists && s.exact && s.value == out.value && s.rv == out.rv {
			return []any{s}
		}
		return nil
	}
	next, ok := apply(s, in, out)
	switch {
	case in.unknown && ok:
		return []any{s, next}
	case in.unknown:
		return []any{s}
	case ok:
		return []any{next}
	}
	return nil
}

func describeState(state any) string {
	s := state.(regState)
	if !s.exists {
		return fmt.Sprintf("absent (rv>=%d)", s.rv)
	}
	if !s.exact {
		return fmt.Sprintf("%q (rv>%d, unseen)", s.value, s.rv)
	}
	return fmt.Sprintf("%q @%d", s.value, s.rv)
}

func describeOp(input, output any) string {
	in, out := input.(regInput), output.(regOutput)
	var b strings.Builder
	fmt.Fprintf(&b, "op %d %s(%s", in.id, in.kind, in.key)
	if in.kind == history.Create || in.kind == history.Update {
		fmt.Fprintf(&b, ", %q", in.value)
	}
	if in.expectRV != 0 {
		fmt.Fprintf(&b, ", if rv=%d", in.expectRV)
	}
	b.WriteString(") -> ")
	switch {
	case in.kind == history.Get && out.exists:
		fmt.Fprintf(&b, "%q @%d", out.value, out.rv)
	case in.kind == history.Get:
		b.WriteString("absent")
	case in.unknown:
		b.WriteString("unknown")
	case out.rv != 0:
		fmt.Fprintf(&b, "ok @%d", out.rv)
	default:
		b.WriteString("ok")
	}
	return b.String()
}

// registerModel is the porcupine model of one ConfigMap key, starting
// absent at startRV. Unknown writes branch into applied and not applied.
func registerModel(startRV uint64) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []any { return []any{regState{rv: startRV}} },
		Step: regStep,
		Equal: func(a, b any) bool {
			return a.(regState) == b.(regState)
		},
		Hash: func(state any) uint64 {
			s := state.(regState)
			f := fnv.New64a()
			fmt.Fprintf(f, "%t|%t|%d|%s", s.exists, s.exact, s.rv, s.value)
			return f.Sum64()
		},
		DescribeOperation: describeOp,
		DescribeState:     describeState,
	}
	return nm.ToModel()
}

// Visual is what porcupine needs to draw the keys that failed.
type Visual struct {
	// Keys are the ConfigMap keys drawn.
	Keys  []string
	model porcupine.Model
	info  porcupine.LinearizationInfo
}

// WriteHTML writes porcupine's HTML visualisation of the failing keys.
func (v *Visual) WriteHTML(w io.Writer) error {
	if v == nil {
		return ErrNoVisual
	}
	if err := porcupine.Visualize(v.model, v.info, w); err != nil {
		return fmt.Errorf("check: visualise %v: %w", v.Keys, err)
	}
	return nil
}

// Linearizability checks, key by key with porcupine, that the ConfigMap
// writes and the linearizable reads form a linearizable history of
// registers with resourceVersions:
//
//   - a successful write's RV is greater than the key's current RV; an
//     update or delete with a precondition needs the key's exact RV;
//   - a get returns exactly the key's (value, RV) or "absent";
//   - a list is one get per key the run touched, at the list's times
//     (a key missing from the list was absent);
//   - Local (resourceVersion=0) reads are left out: not linearizable by
//     contract (see Staleness);
//   - Fail writes are dropped (they had no effect: Outcomes proves it),
//     409 AlreadyExists creates included: they are not kept as reads;
//   - Unknown writes are resolved first: a value seen at RV r makes the
//     write an OK one at r, returning when r was first observed; a value
//     unseen when the log is complete for the run drops it; otherwise it
//     stays, returning UnknownEffectBound after its call, and the model
//     takes both "applied" and "not applied". Unknown deletes always stay
//     unresolved.
//
// Keys share one timeout (a timeout <= 0 leaves no time at all); a timeout
// makes the result inconclusive (Skipped), never OK. On a violation, the Visual draws the failing keys.
func Linearizability(h *history.History, timeout time.Duration) (Result, *Visual) {
	c := newCollector("linearizability")
	byKey := linearOps(h, c)
	model := registerModel(h.StartRV)
	deadline := time.Now().Add(timeout)
	var failed []string
	var inconclusive []string
	for _, key := range sortedKeys(byKey) {
		left := time.Until(deadline)
		if left <= 0 {
			inconclusive = append(inconclusive, key)
			continue
		}
		switch porcupine.CheckOperationsTimeout(model, byKey[key], left) {
		case porcupine.Illegal:
			failed = append(failed, key)
		case porcupine.Unknown:
			inconclusive = append(inconclusive, key)
		}
	}
	var vis *Visual
	if len(failed) > 0 {
		vis = visualise(byKey, failed, h.StartRV, timeout, c)
	}
	if len(inconclusive) > 0 && len(failed) == 0 {
		return c.skip(fmt.Sprintf("inconclusive: porcupine timed out after %v on keys %v", timeout, inconclusive)), nil
	}
	if len(inconclusive) > 0 {
		c.info("inconclusive (timed out) on keys %v", inconclusive)
	}
	return c.result(), vis
}

// visualise reruns the failing keys verbosely, reports the operations that
// fit in no partial linearization, and keeps what porcupine needs to draw.
func visualise(byKey map[string][]porcupine.Operation, failed []string, startRV uint64, timeout time.Duration, c *collector) *Visual {
	part := map[string]int{}
	var ops []porcupine.Operation
	for i, k := range failed {
		part[k] = i
		ops = append(ops, byKey[k]...)
	}
	model := registerModel(startRV)
	model.Partition = func(history []porcupine.Operation) [][]porcupine.Operation {
		out := make([][]porcupine.Operation, len(failed))
		for _, op := range history {
			i := part[op.Input.(regInput).key]
			out[i] = append(out[i], op)
		}
		return out
	}
	_, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	for p, lins := range info.PartialLinearizations() {
		in := map[int]bool{}
		for _, lin := range lins {
			for _, id := range lin {
				in[id] = true
			}
		}
		keyOps := byKey[failed[p]]
		var out []string
		for i, op := range keyOps {
			if !in[i] && len(out) < 5 {
				out = append(out, describeOp(op.Input, op.Output))
			}
		}
		hint := "see the visualisation"
		if len(out) > 0 {
			hint = "these fit no partial linearization: " + strings.Join(out, "; ")
		}
		c.violate("key %s: its %d operations are not linearizable; %s", failed[p], len(keyOps), hint)
	}
	return &Visual{Keys: failed, model: model, info: info}
}

// UnknownEffectBound is how long after its call a write whose answer was
// unknown may still take effect. The server resolves a write it appended
// within its apply timeout (10 s) and the workload's clients give up after
// their request timeout (10 s); a minute is generous. Without a bound an
// unknown write would stay concurrent with everything after it, and on a
// long run porcupine's search grows without limit (a 30-minute history
// exhausted 24 GiB).
const UnknownEffectBound = time.Minute

// linearOps turns the history into porcupine operations per key. An
// unknown write found in the log returns when its resourceVersion was
// first observed (or UnknownEffectBound after its call, if sooner); one
// still unresolved returns UnknownEffectBound after its call.

func linearOps(h *history.History, c *collector) map[string][]porcupine.Operation {
	ref := buildRef(h, history.ConfigMaps)
	obs := observe(h, ref)
	complete := ref.complete(h)
	end := endOf(h)
	keys := map[string]bool{}
	for i := range h.Ops {
		if op := &h.Ops[i]; isConfigMapWrite(op.Kind) || op.Kind == history.Get {
			keys[op.Key] = true
		}
		for k := range h.Ops[i].Items {
			keys[k] = true
		}
	}
	byKey := map[string][]porcupine.Operation{}
	add := func(op *history.Op, key string, in regInput, out regOutput, ret int64) {
		byKey[key] = append(byKey[key], porcupine.Operation{
			ClientId: op.Client, Input: in, Output: out, Call: op.Call, Return: ret, Metadata: op.ID,
		})
	}
	// seen is when each resourceVersion was first observed (a watch event
	// delivered or a read answered with it): a write seen at RV r took
	// effect before then, which bounds its linearization point.
	seen := map[uint64]int64{}
	see := func(rv uint64, at int64) {
		if rv == 0 {
			return
		}
		if t, ok := seen[rv]; !ok || at < t {
			seen[rv] = at
		}
	}
	for _, e := range h.Events {
		if e.Resource == history.ConfigMaps && e.Type != history.Bookmark {
			see(e.RV, e.At)
		}
	}
	for i := range h.Ops {
		op := &h.Ops[i]
		if op.Kind == history.Get && op.Outcome == history.OK && op.Exists {
			see(op.RV, op.Return)
		}
		for _, it := range op.Items {
			see(it.RV, op.Return)
		}
	}
	bound := func(op *history.Op) int64 { return min(end, op.Call+int64(UnknownEffectBound)) }
	var resolvedApplied, resolvedNot, unresolved int
	for i := range h.Ops {
		op := &h.Ops[i]
		switch {
		case isConfigMapWrite(op.Kind):
			in := regInput{id: op.ID, kind: op.Kind, key: op.Key, value: op.Value, expectRV: op.ExpectRV}
			switch op.Outcome {
			case history.OK:
				add(op, op.Key, in, regOutput{rv: op.RV}, op.Return)
			case history.Unknown:
				if rv, found := obs.rv[op.Value]; found && op.Kind != history.Delete {
					resolvedApplied++
					ret := bound(op)
					if t, ok := seen[rv]; ok && t > op.Call {
						ret = min(ret, t)
					}
					add(op, op.Key, in, regOutput{rv: rv}, ret)
					continue
				}
				if complete && op.Kind != history.Delete {
					resolvedNot++
					continue
				}
				unresolved++
				in.unknown = true
				add(op, op.Key, in, regOutput{}, bound(op))
			}
		case op.Kind == history.Get && !op.Local && readOK(op):
			add(op, op.Key, regInput{id: op.ID, kind: history.Get, key: op.Key},
				regOutput{exists: op.Exists, value: op.Read, rv: op.RV}, op.Return)
		case op.Kind == history.List && !op.Local && readOK(op):
			for k := range keys {
				it, ok := op.Items[k]
				add(op, k, regInput{id: op.ID, kind: history.Get, key: k},
					regOutput{exists: ok, value: it.Value, rv: it.RV}, op.Return)
			}
		}
	}
	c.info("%d keys; unknown writes: %d resolved applied, %d resolved not applied, %d left open", len(byKey), resolvedApplied, resolvedNot, unresolved)
	for _, ops := range byKey {
		sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	}
	return byKey
}
