package storage

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/trustplane/trustplane/fsm"
)

// continueToken is the state a continue parameter carries: the revision of
// the first page and the last key returned.
type continueToken struct {
	APIVersion string `json:"v"`
	Revision   uint64 `json:"rv"`
	Start      string `json:"start"`
	// Latest marks an "inconsistent" token, handed out when Revision was
	// compacted: the list continues after Start at the latest revision.
	Latest bool `json:"latest,omitempty"`
}

const continueVersion = "meta.k8s.io/v1"

// EncodeContinue makes a token for the page after lastKey at rev; rev 0
// makes an "inconsistent" token that continues at the latest revision.
func EncodeContinue(rev uint64, lastKey string) string {
	b, _ := json.Marshal(continueToken{APIVersion: continueVersion, Revision: rev, Start: lastKey, Latest: rev == 0})
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeContinue returns the revision (0 for an "inconsistent" token, which
// continues at the latest revision) and the last key of a continue token.
// A token this server did not make is 400 "invalid continue token: ...".
func DecodeContinue(s string) (uint64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return 0, "", apierrors.NewBadRequest(fmt.Sprintf("invalid continue token: %v", err))
	}
	var t continueToken
	if err := json.Unmarshal(b, &t); err != nil {
		return 0, "", apierrors.NewBadRequest(fmt.Sprintf("invalid continue token: %v", err))
	}
	if t.APIVersion != continueVersion || (t.Revision == 0 && !t.Latest) {
		return 0, "", apierrors.NewBadRequest("invalid continue token: unsupported version or revision")
	}
	if t.Latest {
		return 0, t.Start, nil
	}
	return t.Revision, t.Start, nil
}

// ListLimit is the page size of a list. Like kube-apiserver v1.33, whose
// watch cache serves resourceVersion "0" and ignores limit there
// (cacher.computeListLimit), a list at "0" without a continue token is one
// full page; a continue token is always paged.
func ListLimit(opts *metainternalversion.ListOptions) int {
	if opts.ResourceVersion == "0" && opts.Continue == "" {
		return 0
	}
	return int(opts.Limit)
}

// ListStart resolves the revision and start key of a list request, once
// this node is fresh enough to serve it: the token's revision and key for
// a continued list (waiting, bounded, for a token minted by a node further
// ahead), N for an exact list at N (resourceVersionMatch=Exact, or a paged
// list at N without a match, as kube does), else 0, the latest revision.
func (s *Storage) ListStart(ctx context.Context, opts *metainternalversion.ListOptions) (uint64, string, error) {
	if opts.Continue != "" {
		rev, start, err := DecodeContinue(opts.Continue)
		if err != nil {
			return 0, "", err
		}
		// kube-apiserver (storage.ValidateListOptions) tolerates "0"
		// with a token, and refuses any other resourceVersion.
		if opts.ResourceVersion != "" && opts.ResourceVersion != "0" {
			return 0, "", apierrors.NewBadRequest("specifying resource version is not allowed when using continue")
		}
		if rev == 0 {
			// An "inconsistent" token continues at the latest revision.
			return 0, start, nil
		}
		// A token minted by a node further ahead: wait, bounded, until this
		// node has applied its revision, as a read at that revision would.
		if err := s.WaitFor(ctx, rev); err != nil {
			return 0, "", err
		}
		return rev, start, nil
	}
	if err := s.Fresh(ctx, opts.ResourceVersion); err != nil {
		return 0, "", err
	}
	if opts.ResourceVersion != "" && opts.ResourceVersion != "0" &&
		(opts.ResourceVersionMatch == metav1.ResourceVersionMatchExact || (opts.ResourceVersionMatch == "" && opts.Limit > 0)) {
		n, _ := ParseResourceVersion(opts.ResourceVersion) // Fresh parsed it
		return n, "", nil
	}
	return 0, "", nil
}

// inconsistentContinue is kube-apiserver's answer to a continue token whose
// revision has been compacted.
const inconsistentContinue = "The provided continue parameter is too old " +
	"to display a consistent list result. You can start a new list without " +
	"the continue parameter, or use the continue token in this response to " +
	"retrieve the remainder of the results. Continuing with the provided " +
	"token results in an inconsistent list - objects that were created, " +
	"modified, or deleted between the time the first chunk was returned " +
	"and now may show up in the list."

// ListErr maps an fsm read error of a list at rev. A compacted revision is
// 410 Gone; for a continued list (continuing) the 410 carries a new token
// that continues after the same key, startAfter, at the latest revision,
// as kube-apiserver does. A revision not yet applied is 504.
func (s *Storage) ListErr(err error, rev uint64, continuing bool, startAfter string) error {
	switch {
	case errors.Is(err, fsm.ErrCompacted) && continuing:
		e := apierrors.NewResourceExpired(inconsistentContinue)
		e.ErrStatus.ListMeta.Continue = EncodeContinue(0, startAfter)
		return e
	case errors.Is(err, fsm.ErrCompacted):
		return apierrors.NewResourceExpired("The resourceVersion for the provided list is too old.")
	case errors.Is(err, fsm.ErrFutureRevision):
		return s.TooLarge(rev)
	}
	return apierrors.NewInternalError(err)
}
