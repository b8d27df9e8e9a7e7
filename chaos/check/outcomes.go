package check

import (
	"github.com/trustplane/trustplane/chaos/history"
)

// Outcomes checks that the answers the clients got are true:
//
//   - An OK create or update is in the log: its value was seen (in the
//     reference log, a read or a final state) at exactly its returned RV,
//     and the reference log holds no other write at that RV. If its value
//     was seen nowhere, it is lost when its RV lies in a covered range, and
//     "unverified" (an Info count) otherwise.
//   - An OK delete has a DELETED event for its key after its precondition
//     (after the run's start when it had none); missing, it is lost when the
//     range from there to the highest RV seen is covered, else unverified.
//   - A Fail create or update had no effect: its value is seen nowhere.
//     (Fail deletes are not checked: a delete carries no value to trace.)
//   - Every OK read (Local ones too) returned only values some write sent,
//     at the RV the log has for them.
//   - Unknown creates and updates are resolved and counted: applied (value
//     seen), not applied (value unseen and the log complete for the run),
//     or unresolved. Unknown deletes are counted as unresolved.
func Outcomes(h *history.History) Result {
	c := newCollector("outcomes")
	ref := buildRef(h, history.ConfigMaps)
	obs := observe(h, ref)
	for _, s := range obs.conflicts {
		c.violate("one value at two RVs: %s", s)
	}
	sent := map[string]bool{}
	for i := range h.Ops {
		if op := &h.Ops[i]; op.Kind == history.Create || op.Kind == history.Update {
			sent[op.Value] = true
		}
	}
	complete := ref.complete(h)
	var applied, notApplied, unresolved, unverified int
	for i := range h.Ops {
		op := &h.Ops[i]
		switch {
		case op.Kind == history.Create || op.Kind == history.Update:
			rv, seen := obs.rv[op.Value]
			switch op.Outcome {
			case history.OK:
				if e, ok := ref.byRV[op.RV]; ok && (e.deleted() || e.Key != op.Key || e.Value != op.Value) {
					c.violate("op %d %s %s=%q acknowledged at rv %d, but the log has %s there", op.ID, op.Kind, op.Key, op.Value, op.RV, e)
					continue
				}
				switch {
				case seen && rv != op.RV:
					c.violate("op %d %s %s=%q acknowledged at rv %d, but its value is at rv %d (%s)", op.ID, op.Kind, op.Key, op.Value, op.RV, rv, obs.where[op.Value])
				case !seen && ref.cover.has(op.RV):
					c.violate("op %d %s %s=%q acknowledged at rv %d is lost: the watches covered rv %d and nothing holds the value", op.ID, op.Kind, op.Key, op.Value, op.RV, op.RV)
				case !seen:
					unverified++
				}
			case history.Fail:
				if seen {
					c.violate("op %d %s %s=%q answered %d (%s, no effect), but its value is at rv %d (%s)", op.ID, op.Kind, op.Key, op.Value, op.Code, op.Reason, rv, obs.where[op.Value])
				}
			case history.Unknown:
				switch {
				case seen:
					applied++
				case complete:
					notApplied++
				default:
					unresolved++
				}
			}
		case op.Kind == history.Delete:
			switch op.Outcome {
			case history.OK:
				c.checkDelete(h, ref, op, &unverified)
			case history.Unknown:
				unresolved++
			}
		case (op.Kind == history.Get || op.Kind == history.List) && readOK(op):
			c.checkRead(ref, sent, op)
		}
	}
	c.info("unknown writes: %d applied, %d not applied, %d unresolved", applied, notApplied, unresolved)
	if unverified > 0 {
		c.info("%d acknowledged writes unverified (outside the watches' coverage, value never read)", unverified)
	}
	return c.result()
}

// checkDelete looks for the DELETED event of an OK delete.
func (c *collector) checkDelete(h *history.History, ref *refLog, op *history.Op, unverified *int) {
	if op.RV != 0 {
		e, ok := ref.byRV[op.RV]
		switch {
		case ok && (!e.deleted() || e.Key != op.Key):
			c.violate("op %d delete %s acknowledged at rv %d, but the log has %s there", op.ID, op.Key, op.RV, e)
		case !ok && ref.cover.has(op.RV):
			c.violate("op %d delete %s acknowledged at rv %d is lost: the watches covered it and saw no DELETED", op.ID, op.Key, op.RV)
		case !ok:
			*unverified++
		}
		return
	}
	after := max(op.ExpectRV, h.StartRV)
	if ref.deletedAfter(op.Key, after) {
		return
	}
	if ref.cover.covers(after, ref.maxRV) {
		c.violate("op %d delete %s (precondition rv %d) acknowledged, but no DELETED event for it in the covered range (%d, %d]", op.ID, op.Key, op.ExpectRV, after, ref.maxRV)
		return
	}
	*unverified++
}

// checkRead holds a read's answer to the log.
func (c *collector) checkRead(ref *refLog, sent map[string]bool, op *history.Op) {
	one := func(key, value string, rv uint64) {
		if !sent[value] {
			c.violate("op %d %s returned %s=%q at rv %d, a value no write sent", op.ID, op.Kind, key, value, rv)
			return
		}
		e, ok := ref.byRV[rv]
		switch {
		case ok && (e.deleted() || e.Key != key || e.Value != value):
			c.violate("op %d %s returned %s=%q at rv %d, but the log has %s there", op.ID, op.Kind, key, value, rv, e)
		case !ok && ref.cover.has(rv):
			c.violate("op %d %s returned %s=%q at rv %d, which the watches covered and never saw", op.ID, op.Kind, key, value, rv)
		}
	}
	if op.Kind == history.Get {
		if op.Exists {
			one(op.Key, op.Read, op.RV)
		}
		return
	}
	for _, k := range sortedKeys(op.Items) {
		one(k, op.Items[k].Value, op.Items[k].RV)
	}
}
