package check

import (
	"strings"
	"testing"

	"github.com/trustplane/trustplane/chaos/history"
)

func TestTokens(t *testing.T) {
	mint := func(id int64, key, kid string, at int64) history.Op {
		return history.Op{ID: id, Kind: history.TokenMint, Key: key, Read: kid, Outcome: history.OK, Call: ms(at), Return: ms(at + 1)}
	}
	review := func(id int64, key, kid string, ok bool, at int64) history.Op {
		return history.Op{ID: id, Node: "n1", Kind: history.TokenReview, Key: key, Read: kid, Exists: ok, Outcome: history.OK, Call: ms(at), Return: ms(at + 1)}
	}
	verify := func(id int64, key, kid string, ok bool, at int64) history.Op {
		return history.Op{ID: id, Node: "n2", Kind: history.TokenVerify, Key: key, Read: kid, Exists: ok, Outcome: history.OK, Call: ms(at), Return: ms(at + 1)}
	}
	for _, tc := range []struct {
		name string
		ops  []history.Op
		want string // a violation's text, "" for none
	}{
		{"a rotation: the old key's token refused once the new key signs", []history.Op{
			mint(1, "t1", "old", 0), review(2, "t1", "old", true, 10), mint(3, "t2", "new", 20), review(4, "t1", "old", false, 30), review(5, "t2", "new", true, 31),
		}, ""},
		{"a token of the active key refused", []history.Op{
			mint(1, "t1", "k", 0), review(2, "t1", "k", false, 10), mint(3, "t2", "k", 20),
		}, "refused by n1"},
		{"a token of the active key not verified with the JWKS", []history.Op{
			mint(1, "t1", "k", 0), verify(2, "t1", "k", false, 10), mint(3, "t2", "k", 20),
		}, "failed to verify"},
		{"a refused token accepted again", []history.Op{
			mint(1, "t1", "old", 0), mint(2, "t2", "new", 5), review(3, "t1", "old", false, 10), review(4, "t1", "old", true, 20),
		}, "accepted by n1 after op 3 refused it"},
		{"accepted and refused at once (overlapping reviews)", []history.Op{
			mint(1, "t1", "old", 0), mint(2, "t2", "new", 5),
			{ID: 3, Node: "n1", Kind: history.TokenReview, Key: "t1", Read: "old", Exists: false, Outcome: history.OK, Call: ms(10), Return: ms(20)},
			{ID: 4, Node: "n2", Kind: history.TokenReview, Key: "t1", Read: "old", Exists: true, Outcome: history.OK, Call: ms(15), Return: ms(16)},
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Tokens(&history.History{Ops: tc.ops})
			got := strings.Join(r.Violations, "\n")
			if tc.want == "" && !r.OK || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Fatalf("violations %q, want %q", got, tc.want)
			}
		})
	}
	if r := Tokens(&history.History{}); r.Skipped == "" {
		t.Fatal("a run without tokens is not skipped")
	}
}
