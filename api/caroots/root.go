package caroots

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/trustplane/trustplane/api/rotation"
	"github.com/trustplane/trustplane/certs"
	"github.com/trustplane/trustplane/fsm"
)

// Root is the kind's rotation root.
func (s *Store) Root() rotation.Root { return root{s} }

type root struct{ s *Store }

// load reads the record a step starts from; a record not seeded yet
// refuses every step.
func (r root) load() (*record, map[string]*certs.CA, *fsm.KV, error) {
	rec, cas, kv, err := r.s.read()
	if err == nil && rec == nil {
		err = fmt.Errorf("%w: the %ss are not seeded yet (the leader seeds them at start)", rotation.ErrNotReady, r.s.cfg.Kind.Noun)
	}
	return rec, cas, kv, err
}

// builds refuses start and promote while a member runs a build that does
// not follow the CAs live (not to be forced: it would refuse its peers' or
// its clients' new certificates).
func (r root) builds(ctx context.Context) error {
	return rotation.Builds(ctx, r.s.cfg.Unable, "trusts its CA directory's "+r.s.cfg.Kind.Noun+" alone")
}

// members is every member's view of the record: whether it has applied it,
// and so trusts every CA the leader trusts.
func (r root) members(ctx context.Context, kv *fsm.KV) ([]rotation.Member, string) {
	return rotation.Members(ctx, r.s.cfg.Members, kv.ModRevision, "the "+r.s.cfg.Kind.Noun+"s")
}

// presenting says which members do not yet present a certificate issued by
// the active CA ("" when all do).
func (r root) presenting(ctx context.Context, active string) string {
	if r.s.cfg.Presenting == nil {
		return ""
	}
	by, err := r.s.cfg.Presenting(ctx)
	if err != nil {
		return "the members' certificates are unknown: " + err.Error()
	}
	var behind []string
	for name, id := range by {
		if id != active {
			behind = append(behind, fmt.Sprintf("%s (%s)", name, orUnknown(id)))
		}
	}
	if len(behind) == 0 {
		return ""
	}
	sort.Strings(behind)
	return fmt.Sprintf("members %v still present a certificate of another %s than %s", behind, r.s.cfg.Kind.Noun, active)
}

func orUnknown(id string) string {
	if id == "" {
		return "unknown"
	}
	return id
}

func (r root) status(ctx context.Context, done string) (*rotation.Status, error) {
	rec, _, kv, err := r.load()
	if err != nil {
		return nil, err
	}
	es := rec.entries()
	st := &rotation.Status{Root: r.s.cfg.Kind.Root, Keys: rotation.Keys(es), Done: done}
	var lacking string
	st.Members, lacking = r.members(ctx, kv)
	switch {
	case rotation.First(es, rotation.Pending) != nil:
		st.Next, st.Waiting = rotation.StepPromote, lacking
	case rotation.First(es, rotation.Retiring) != nil:
		st.Next = rotation.StepFinish
		if st.Waiting = lacking; lacking == "" {
			st.Waiting = r.presenting(ctx, rotation.First(es, rotation.Active).ID)
		}
		if st.Waiting == "" {
			_, retiring := rotation.Finish(es)
			st.Waiting = r.issuedStillValid(retiring)
		}
	}
	return st, nil
}

// Status reports each CA's phase (by id), the members' view and the next
// step.
func (r root) Status(ctx context.Context) (*rotation.Status, error) { return r.status(ctx, "") }

// Start adds a pending node CA (the operator's PEM bundle, or a new one):
// every node trusts it once applied, none presents its certificates yet.
func (r root) Start(ctx context.Context, o rotation.Options) (*rotation.Status, error) {
	rec, _, kv, err := r.load()
	if err != nil {
		return nil, err
	}
	if err := r.builds(ctx); err != nil {
		return nil, err
	}
	var ca *certs.CA
	if o.Key != nil {
		if ca, err = certs.ParseCA(o.Key); err != nil {
			return nil, fmt.Errorf("%w: %w", rotation.ErrNotReady, err)
		}
	} else if ca, err = r.s.cfg.Kind.NewCA(); err != nil {
		return nil, err
	}
	if r.s.cfg.Forbidden != nil {
		for _, f := range r.s.cfg.Forbidden() {
			if certs.SameKey(f, ca.Cert) {
				return nil, fmt.Errorf("%w: that CA is already a CA of another kind (the node CA, the cluster CA or a signer's CA); a CA serves one purpose, or a certificate it signs for an API user could pass for a node", rotation.ErrNotReady)
			}
		}
	}
	id := certs.CertID(ca.Cert)
	es, err := rotation.AddPending(rec.entries(), id, r.s.cfg.Now().Unix())
	if err != nil {
		if p := rotation.First(rec.entries(), rotation.Pending); p != nil && p.ID == id {
			return r.status(ctx, r.s.cfg.Kind.Noun+" "+id+" is pending already")
		}
		return nil, err
	}
	bundle, err := ca.PEM()
	if err != nil {
		return nil, err
	}
	if err := r.s.write(ctx, kv, rec.withEntries(es, map[string][]byte{id: bundle})); err != nil {
		return nil, err
	}
	return r.status(ctx, "started: "+r.s.cfg.Kind.Noun+" "+id+" is pending")
}

// Promote makes the pending CA active, once every member trusts it (unless
// forced): every node then issues itself a certificate under it.
func (r root) Promote(ctx context.Context, o rotation.Options) (*rotation.Status, error) {
	rec, _, kv, err := r.load()
	if err != nil {
		return nil, err
	}
	es, p, err := rotation.Promote(rec.entries(), r.s.cfg.Now().Unix())
	if err != nil {
		return nil, err
	}
	if err := r.builds(ctx); err != nil {
		return nil, err
	}
	if _, lacking := r.members(ctx, kv); lacking != "" && !o.Force {
		return nil, fmt.Errorf("%w: %s", rotation.ErrNotReady, lacking)
	}
	if err := r.s.write(ctx, kv, rec.withEntries(es, nil)); err != nil {
		return nil, err
	}
	return r.status(ctx, "promoted: every node presents a certificate of "+r.s.cfg.Kind.Noun+" "+p.ID+" once it has applied this")
}

// Finish removes the retiring CAs, once every member presents a certificate
// of the active one (unless forced: a member that does not then cannot
// talk to the others until it is given one).
func (r root) Finish(ctx context.Context, o rotation.Options) (*rotation.Status, error) {
	rec, _, kv, err := r.load()
	if err != nil {
		return nil, err
	}
	kept, removed := rotation.Finish(rec.entries())
	if len(removed) == 0 {
		return r.status(ctx, "no retiring "+r.s.cfg.Kind.Noun+" to remove")
	}
	if !o.Force {
		if why := r.presenting(ctx, rotation.First(kept, rotation.Active).ID); why != "" {
			return nil, fmt.Errorf("%w: %s", rotation.ErrNotReady, why)
		}
		if why := r.issuedStillValid(removed); why != "" {
			return nil, fmt.Errorf("%w: %s", rotation.ErrNotReady, why)
		}
	}
	if err := r.s.write(ctx, kv, rec.withEntries(kept, nil)); err != nil {
		return nil, err
	}
	ids := make([]string, len(removed))
	for i, e := range removed {
		ids[i] = e.ID
	}
	return r.status(ctx, fmt.Sprintf("finished: %ss %v removed", r.s.cfg.Kind.Noun, ids))
}

// issuedStillValid says why finish must wait while a certificate a
// retiring CA issued may still be valid (Config.RetireAfter after it
// stopped issuing), "" when it need not.
func (r root) issuedStillValid(retiring []rotation.Entry) string {
	if r.s.cfg.RetireAfter <= 0 {
		return ""
	}
	for _, e := range retiring {
		if until := time.Unix(e.Since, 0).Add(r.s.cfg.RetireAfter); r.s.cfg.Now().Before(until) {
			return fmt.Sprintf("certificates %s %s issued may be valid until %s; finish then, or pass --force", r.s.cfg.Kind.Noun, e.ID, until.UTC().Format(time.RFC3339))
		}
	}
	return ""
}

// Abort undoes the rotation in progress; after promote every node issues
// itself a certificate of the previous CA again.
func (r root) Abort(ctx context.Context, _ rotation.Options) (*rotation.Status, error) {
	rec, _, kv, err := r.load()
	if err != nil {
		return nil, err
	}
	es, done, err := rotation.Abort(rec.entries(), r.s.cfg.Now().Unix())
	if err != nil {
		return nil, err
	}
	if err := r.s.write(ctx, kv, rec.withEntries(es, nil)); err != nil {
		return nil, err
	}
	return r.status(ctx, "aborted: "+done)
}
