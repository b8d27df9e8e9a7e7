package check

import (
	"sort"

	"github.com/trustplane/trustplane/chaos/history"
)

// Tokens checks the ServiceAccount tokens of a run while their signing key
// rotates:
//
//   - a token is never refused (TokenReview) or fails to verify with the
//     JWKS while its key still signs: a token minted with the same key id
//     started after the refusal returned, so the key was active after it;
//   - a token once refused stays refused on every node: no review that
//     started after a refusal returned accepts it again (finish removes a
//     key from every node at once).
//
// A refusal of a token whose key no longer signs is what a finish does on
// purpose. It is skipped when the run minted no tokens.
func Tokens(h *history.History) Result {
	c := newCollector("tokens")
	lastMint := map[string]int64{} // key id → the latest Call of a mint with it
	minted := 0
	for i := range h.Ops {
		if op := &h.Ops[i]; op.Kind == history.TokenMint && op.Outcome == history.OK && op.Read != "" {
			minted++
			lastMint[op.Read] = max(lastMint[op.Read], op.Call)
		}
	}
	if minted == 0 {
		return c.skip("no tokens in the run")
	}
	byToken := map[string][]*history.Op{}
	reviews, verified := 0, 0
	for i := range h.Ops {
		op := &h.Ops[i]
		if op.Outcome != history.OK || (op.Kind != history.TokenReview && op.Kind != history.TokenVerify) {
			continue
		}
		if op.Kind == history.TokenVerify {
			verified++
			if !op.Exists && lastMint[op.Read] > op.Return {
				c.violate("op %d: token %s (key %s) failed to verify with the JWKS of %s (%s), while its key still signed tokens", op.ID, op.Key, op.Read, op.Node, op.Reason)
			}
			continue
		}
		reviews++
		if !op.Exists && lastMint[op.Read] > op.Return {
			c.violate("op %d: token %s (key %s) refused by %s (%s), while its key still signed tokens", op.ID, op.Key, op.Read, op.Node, op.Reason)
		}
		byToken[op.Key] = append(byToken[op.Key], op)
	}
	for token, ops := range byToken {
		sort.Slice(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
		var refused *history.Op
		for _, op := range ops {
			switch {
			case !op.Exists && (refused == nil || op.Return < refused.Return):
				refused = op
			case op.Exists && refused != nil && op.Call > refused.Return:
				c.violate("op %d: token %s accepted by %s after op %d refused it on %s", op.ID, token, op.Node, refused.ID, refused.Node)
			}
		}
	}
	c.info("%d tokens minted under %d keys, %d reviews, %d JWKS verifications", minted, len(lastMint), reviews, verified)
	return c.result()
}
