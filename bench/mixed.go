package bench

import (
	"context"
	"fmt"
	"strings"
)

// mixShare is one kind of operation in the mixed workload and its share
// of every 20 operations.
type mixShare struct {
	name string
	of20 int
}

// mix is the mixed workload's fixed blend, read-heavy as a control plane's
// load is: gets, token reviews, some creates, a page of a large list and a
// certificate now and then.
var mix = []mixShare{
	{"get", 8}, {"get-rv0", 4}, {"create", 3}, {"tokenreview", 3}, {"list-page", 1}, {"csr", 1},
}

var mixedWorkload = &workload{
	name: "mixed",
	detail: func(c Config) string {
		var parts []string
		for _, m := range mix {
			parts = append(parts, fmt.Sprintf("%s %d%%", m.name, m.of20*5))
		}
		return fmt.Sprintf("one of a fixed blend (%s; list-page: the first %d ConfigMaps)", strings.Join(parts, ", "), c.ListPageSize)
	},
	prepare: func(ctx context.Context, e *env) (load, error) {
		ops := map[string]opFunc{}
		var err error
		if ops["get"], err = getOp(ctx, e, ""); err != nil {
			return nil, err
		}
		if ops["get-rv0"], err = getOp(ctx, e, "0"); err != nil {
			return nil, err
		}
		if ops["create"], err = createOp(ctx, e, "m"); err != nil {
			return nil, err
		}
		if ops["tokenreview"], err = tokenReviewOp(ctx, e); err != nil {
			return nil, err
		}
		if ops["list-page"], err = listOp(ctx, e, e.cfg.ListPageSize, true); err != nil {
			return nil, err
		}
		is, err := newCSRIssuer(ctx, e, "m")
		if err != nil {
			return nil, err
		}
		ops["csr"] = is.issue
		var slots []opFunc
		for _, name := range mixOrder() {
			slots = append(slots, ops[name])
		}
		return closedLoop{e, func(ctx context.Context, client, seq int) error {
			return slots[(client+seq)%len(slots)](ctx, client, seq)
		}}, nil
	},
}

// mixOrder spreads the blend over 20 slots, interleaved so that a client
// does not run one kind many times in a row.
func mixOrder() []string {
	left := make([]int, len(mix))
	total := 0
	for i, m := range mix {
		left[i] = m.of20
		total += m.of20
	}
	var slots []string
	for len(slots) < total {
		for i, m := range mix {
			if left[i] > 0 {
				left[i]--
				slots = append(slots, m.name)
			}
		}
	}
	return slots
}
