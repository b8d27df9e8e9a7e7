package rotation

import (
	"context"
	"fmt"
	"sort"
)

// Applied returns the members' applied indexes by name.
type Applied func(ctx context.Context) (map[string]uint64, error)

// Members is every member's view of a root: whether it has applied the
// root's record at revision rev, and so trusts what the leader trusts.
// lacking says which have not, as a reason a step waits for, naming what
// they lack (what), or "" when all have. A nil applied (one node, tests)
// or a zero rev views nothing.
func Members(ctx context.Context, applied Applied, rev uint64, what string) (view []Member, lacking string) {
	if applied == nil || rev == 0 {
		return nil, ""
	}
	indexes, err := applied(ctx)
	if err != nil {
		return nil, "the members' applied indexes are unknown: " + err.Error()
	}
	names := make([]string, 0, len(indexes))
	for n := range indexes {
		names = append(names, n)
	}
	sort.Strings(names)
	var behind []string
	for _, n := range names {
		m := Member{Name: n, Trusts: indexes[n] >= rev}
		if !m.Trusts {
			m.Detail = fmt.Sprintf("applied %d of %d", indexes[n], rev)
			behind = append(behind, n)
		}
		view = append(view, m)
	}
	if len(behind) > 0 {
		return view, fmt.Sprintf("members %v have not applied %s yet", behind, what)
	}
	return view, ""
}

// Builds refuses (ErrNotReady, not to be forced) a step while a member runs
// a build that cannot take part in it: unable returns such members (those
// that do not report the root's feature); nil unable views none. what says
// what those builds cannot do.
func Builds(ctx context.Context, unable func(ctx context.Context) ([]string, error), what string) error {
	if unable == nil {
		return nil
	}
	names, err := unable(ctx)
	if err != nil {
		return fmt.Errorf("%w: the members' builds are unknown: %w", ErrNotReady, err)
	}
	if len(names) > 0 {
		sort.Strings(names)
		return fmt.Errorf("%w: members %v run a build that %s, or cannot say which build they run; upgrade or start them first", ErrNotReady, names, what)
	}
	return nil
}
