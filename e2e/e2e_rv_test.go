package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// rvItem is one listed object: "namespace/name" and its resourceVersion.
type rvItem struct{ key, rv string }

// rvList is a raw list answer.
type rvList struct {
	code      int
	rv        string
	cont      string
	remaining *int64
	items     []rvItem
	res       httpResult
}

// rvListGet lists configmaps across all namespaces with the raw query q.
func rvListGet(t testing.TB, n *node, c *http.Client, q url.Values) rvList {
	t.Helper()
	r := do(t, c, http.MethodGet, n.url()+"/api/v1/configmaps?"+q.Encode(), map[string]string{"Accept": "application/json"}, nil)
	out := rvList{code: r.code, res: r}
	if r.code != http.StatusOK {
		return out
	}
	var l struct {
		Metadata metav1.ListMeta `json:"metadata"`
		Items    []struct {
			Metadata metav1.ObjectMeta `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(r.body, &l); err != nil {
		t.Fatalf("list %s: %v\n%s", q.Encode(), err, r.body)
	}
	out.rv, out.cont, out.remaining = l.Metadata.ResourceVersion, l.Metadata.Continue, l.Metadata.RemainingItemCount
	out.items = []rvItem{}
	for _, it := range l.Items {
		out.items = append(out.items, rvItem{it.Metadata.Namespace + "/" + it.Metadata.Name, it.Metadata.ResourceVersion})
	}
	return out
}

// rvPages follows continue tokens from first, as client-go's pager does
// (limit and continue, plus extra), and checks that every page has first's
// collection resourceVersion and at most limit items, and that
// remainingItemCount is set only where kube sets it (more pages, no
// selector) and counts what the later pages hold. It returns every item.
func rvPages(t testing.TB, n *node, c *http.Client, first rvList, limit int, filtered bool, extra url.Values) []rvItem {
	t.Helper()
	type count struct {
		page      int
		remaining int64
		seen      int
	}
	var counts []count
	var items []rvItem
	page := first
	for i := 0; ; i++ {
		if len(page.items) > limit {
			t.Fatalf("page %d has %d items, limit %d", i, len(page.items), limit)
		}
		if page.rv != first.rv {
			t.Fatalf("page %d has collection resourceVersion %s, first page %s", i, page.rv, first.rv)
		}
		items = append(items, page.items...)
		switch {
		case page.cont == "" && page.remaining != nil:
			t.Fatalf("last page %d has remainingItemCount %d", i, *page.remaining)
		case page.cont != "" && filtered && page.remaining != nil:
			t.Fatalf("page %d with a selector has remainingItemCount %d", i, *page.remaining)
		case page.cont != "" && !filtered && page.remaining == nil:
			t.Fatalf("page %d without a selector has no remainingItemCount", i)
		case page.cont != "" && !filtered:
			counts = append(counts, count{i, *page.remaining, len(items)})
		}
		if page.cont == "" {
			break
		}
		if i > 100 {
			t.Fatal("paging does not end")
		}
		q := url.Values{"limit": {strconv.Itoa(limit)}, "continue": {page.cont}}
		for k, v := range extra {
			q[k] = v
		}
		page = rvListGet(t, n, c, q)
		if page.code != http.StatusOK {
			t.Fatalf("page %d: %d %s", i+1, page.code, page.res.body)
		}
	}
	for _, ct := range counts {
		if later := int64(len(items) - ct.seen); ct.remaining != later {
			t.Errorf("page %d remainingItemCount %d, later pages held %d", ct.page, ct.remaining, later)
		}
	}
	if items == nil {
		items = []rvItem{}
	}
	return items
}

func countStr(p *int64) string {
	if p == nil {
		return "none"
	}
	return strconv.FormatInt(*p, 10)
}

func rvNum(t testing.TB, rv string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil || v == 0 {
		t.Fatalf("resourceVersion %q is not a positive integer", rv)
	}
	return v
}

func keysOf(items []rvItem) []string {
	out := []string{}
	for _, it := range items {
		out = append(out, it.key)
	}
	return out
}

// invalidListOptions is kube-apiserver's 422 for ListOptions that
// ValidateListOptions refuses (endpoints/handlers/get.go).
func invalidListOptions(msgs ...string) string {
	errs := make([]string, len(msgs))
	for i, m := range msgs {
		errs[i] = "resourceVersionMatch: Forbidden: " + m
	}
	if len(errs) == 1 {
		return `ListOptions.meta.k8s.io "" is invalid: ` + errs[0]
	}
	return `ListOptions.meta.k8s.io "" is invalid: [` + strings.Join(errs, ", ") + `]`
}

const (
	msgNoRV       = "resourceVersionMatch is forbidden unless resourceVersion is provided"
	msgContinue   = "resourceVersionMatch is forbidden when continue is provided"
	msgExactZero  = `resourceVersionMatch "exact" is forbidden for resourceVersion "0"`
	msgRVContinue = "specifying resource version is not allowed when using continue"
)

// TestRVTable drives the resourceVersion × resourceVersionMatch × paging
// table of get and list (kube's api-concepts "Semantics for get and list")
// against one node, with kube-apiserver v1.33's answers for invalid cells.
func TestRVTable(t *testing.T) {
	// No controllers: the test counts exactly the objects it writes.
	n := startNode(t, "--controllers=false")
	ctx := context.Background()
	cs := n.clientset()
	c := n.httpClient()

	for _, ns := range []string{"ns", "ns-a"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cm := func(ns, name string, data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"rv": "table"}}, Data: data}
	}
	// Created out of order: the list orders them.
	for _, k := range []string{"ns-a/b", "ns/z", "ns/c", "ns-a/a", "ns/a", "ns/b", "ns/d"} {
		ns, name, _ := strings.Cut(k, "/")
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm(ns, name, map[string]string{"v": "1"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// The state at N: every configmap and its resourceVersion.
	atN := rvListGet(t, n, c, url.Values{})
	if atN.code != http.StatusOK {
		t.Fatalf("list: %d %s", atN.code, atN.res.body)
	}
	N := atN.rv
	ours := []string{}
	for _, k := range keysOf(atN.items) {
		if strings.HasPrefix(k, "ns/") || strings.HasPrefix(k, "ns-a/") {
			ours = append(ours, k)
		}
	}
	if want := []string{"ns/a", "ns/b", "ns/c", "ns/d", "ns/z", "ns-a/a", "ns-a/b"}; !reflect.DeepEqual(ours, want) {
		t.Fatalf("items not ordered by namespace then name: %v, want %v", ours, want)
	}

	// After N: an update, a delete and two creates.
	b, err := cs.CoreV1().ConfigMaps("ns").Get(ctx, "b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	bAtN := b.ResourceVersion
	b.Data = map[string]string{"v": "2"}
	if _, err := cs.CoreV1().ConfigMaps("ns").Update(ctx, b, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cs.CoreV1().ConfigMaps("ns").Delete(ctx, "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("ns").Create(ctx, cm("ns", "e", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	last, err := cs.CoreV1().ConfigMaps("ns-a").Create(ctx, cm("ns-a", "c", nil), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	latestWrite := rvNum(t, last.ResourceVersion)

	// The current state, for cells that read the latest.
	now := rvListGet(t, n, c, url.Values{})
	if now.code != http.StatusOK {
		t.Fatalf("list: %d %s", now.code, now.res.body)
	}
	if rvNum(t, now.rv) < latestWrite {
		t.Fatalf("list resourceVersion %s older than the last write %d", now.rv, latestWrite)
	}
	if reflect.DeepEqual(now.items, atN.items) {
		t.Fatal("the writes after N did not change the list")
	}

	// A continue token minted at N: the second page starts after two items.
	tokenAtN := rvListGet(t, n, c, url.Values{"resourceVersion": {N}, "resourceVersionMatch": {"Exact"}, "limit": {"2"}})
	if tokenAtN.code != http.StatusOK || tokenAtN.cont == "" || tokenAtN.rv != N {
		t.Fatalf("exact first page at %s: %d rv %s continue %q %s", N, tokenAtN.code, tokenAtN.rv, tokenAtN.cont, tokenAtN.res.body)
	}
	if !reflect.DeepEqual(tokenAtN.items, atN.items[:2]) {
		t.Fatalf("exact first page %v, want %v", tokenAtN.items, atN.items[:2])
	}

	type want int
	const (
		invalid  want = iota // 4xx with a message
		latest               // most recent: collection RV ≥ the last write
		anyRV                // any: served locally
		notOlder             // collection RV ≥ N
		exact                // collection RV = N, the items as they were at N
		fromTok              // the token's version (N), items after the first page
	)
	const limit = 2
	cells := []struct {
		rvm, paging, rv string // rv: "unset", "0" or "N"
		want            want
		code            int
		reason          metav1.StatusReason
		msg             string
		onePage         bool // limit ignored (resourceVersion "0")
	}{
		// resourceVersionMatch unset.
		{"", "none", "unset", latest, 200, "", "", false},
		{"", "none", "0", anyRV, 200, "", "", false},
		{"", "none", "N", notOlder, 200, "", "", false},
		{"", "limit", "unset", latest, 200, "", "", false},
		// kube v1.33's watch cache serves "0" and ignores limit.
		{"", "limit", "0", anyRV, 200, "", "", true},
		{"", "limit", "N", exact, 200, "", "", false},
		{"", "continue", "unset", fromTok, 200, "", "", false},
		{"", "continue", "0", fromTok, 200, "", "", false},
		{"", "continue", "N", invalid, 400, metav1.StatusReasonBadRequest, msgRVContinue, false},
		// Exact.
		{"Exact", "none", "unset", invalid, 422, metav1.StatusReasonInvalid, invalidListOptions(msgNoRV), false},
		{"Exact", "none", "0", invalid, 422, metav1.StatusReasonInvalid, invalidListOptions(msgExactZero), false},
		{"Exact", "none", "N", exact, 200, "", "", false},
		{"Exact", "limit", "unset", invalid, 422, metav1.StatusReasonInvalid, invalidListOptions(msgNoRV), false},
		{"Exact", "limit", "0", invalid, 422, metav1.StatusReasonInvalid, invalidListOptions(msgExactZero), false},
		{"Exact", "limit", "N", exact, 200, "", "", false},
		{"Exact", "continue", "unset", invalid, 422, metav1.StatusReasonInvalid, invalidListOptions(msgNoRV, msgContinue), false},
		{"Exact", "continue", "0", invalid, 422, metav1.StatusReasonInvalid, invalidListOptions(msgContinue, msgExactZero), false},
		{"Exact", "continue", "N", invalid, 422, metav1.StatusReasonInvalid, invalidListOptions(msgContinue), false},
		// NotOlderThan.
		{"NotOlderThan", "none", "unset", invalid, 422, metav1.StatusReasonInvalid, invalidListOptions(msgNoRV), false},
		{"NotOlderThan", "none", "0", anyRV, 200, "", "", false},
		{"NotOlderThan", "none", "N", notOlder, 200, "", "", false},
		{"NotOlderThan", "limit", "unset", invalid, 422, metav1.StatusReasonInvalid, invalidListOptions(msgNoRV), false},
		{"NotOlderThan", "limit", "0", anyRV, 200, "", "", true},
		{"NotOlderThan", "limit", "N", notOlder, 200, "", "", false},
		{"NotOlderThan", "continue", "unset", invalid, 422, metav1.StatusReasonInvalid, invalidListOptions(msgNoRV, msgContinue), false},
		{"NotOlderThan", "continue", "0", invalid, 422, metav1.StatusReasonInvalid, invalidListOptions(msgContinue), false},
		{"NotOlderThan", "continue", "N", invalid, 422, metav1.StatusReasonInvalid, invalidListOptions(msgContinue), false},
	}
	for _, tc := range cells {
		name := fmt.Sprintf("list rvm=%s paging=%s rv=%s", tc.rvm, tc.paging, tc.rv)
		if tc.rvm == "" {
			name = fmt.Sprintf("list rvm=unset paging=%s rv=%s", tc.paging, tc.rv)
		}
		t.Run(name, func(t *testing.T) {
			q := url.Values{}
			extra := url.Values{} // parameters repeated on later pages
			switch tc.rv {
			case "0":
				q.Set("resourceVersion", "0")
			case "N":
				q.Set("resourceVersion", N)
			}
			if tc.rvm != "" {
				q.Set("resourceVersionMatch", tc.rvm)
			}
			if tc.paging != "none" {
				q.Set("limit", strconv.Itoa(limit))
			}
			if tc.paging == "continue" {
				q.Set("continue", tokenAtN.cont)
				// The cell's parameters go with every page.
				for k, v := range q {
					if k != "limit" && k != "continue" {
						extra[k] = v
					}
				}
			}
			got := rvListGet(t, n, c, q)
			if tc.want == invalid {
				wantStatus(t, got.res, tc.code, tc.reason, tc.msg)
				return
			}
			if got.code != http.StatusOK {
				t.Fatalf("%s: %d %s", q.Encode(), got.code, got.res.body)
			}
			items := got.items
			switch {
			case tc.paging == "none" || tc.onePage:
				if got.cont != "" || got.remaining != nil {
					t.Fatalf("unpaged answer has continue %q remainingItemCount %s", got.cont, countStr(got.remaining))
				}
			default:
				items = rvPages(t, n, c, got, limit, false, extra)
			}
			gotRV := rvNum(t, got.rv)
			switch tc.want {
			case latest, anyRV, notOlder:
				// On one node the local state holds every acknowledged
				// write, so "any" and "not older than" see them too.
				if gotRV < latestWrite {
					t.Fatalf("collection resourceVersion %d older than the last write %d", gotRV, latestWrite)
				}
				if tc.want == notOlder && gotRV < rvNum(t, N) {
					t.Fatalf("collection resourceVersion %d older than %s", gotRV, N)
				}
				if got.rv == now.rv && !reflect.DeepEqual(items, now.items) {
					t.Fatalf("items at %s: %v, want %v", got.rv, items, now.items)
				}
			case exact:
				if got.rv != N {
					t.Fatalf("collection resourceVersion %s, want exactly %s", got.rv, N)
				}
				if !reflect.DeepEqual(items, atN.items) {
					t.Fatalf("items at %s: %v, want the state at N %v", N, items, atN.items)
				}
			case fromTok:
				if got.rv != N {
					t.Fatalf("collection resourceVersion %s, want the token's %s", got.rv, N)
				}
				if want := atN.items[2:]; !reflect.DeepEqual(items, want) {
					t.Fatalf("items after the token: %v, want %v", items, want)
				}
			}
		})
	}

	t.Run("list with an unknown resourceVersionMatch or a resourceVersion that is not a number", func(t *testing.T) {
		r := rvListGet(t, n, c, url.Values{"resourceVersion": {N}, "resourceVersionMatch": {"Bogus"}})
		wantStatus(t, r.res, http.StatusUnprocessableEntity, metav1.StatusReasonInvalid,
			`ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Unsupported value: "Bogus": supported values: "Exact", "NotOlderThan", ""`)
		for _, q := range []url.Values{
			{"resourceVersion": {"abc"}},
			{"resourceVersion": {"abc"}, "resourceVersionMatch": {"Exact"}, "limit": {"2"}},
		} {
			r := rvListGet(t, n, c, q)
			wantStatus(t, r.res, http.StatusBadRequest, metav1.StatusReasonBadRequest,
				`invalid resource version: resourceVersion: Invalid value: "abc": strconv.ParseUint: parsing "abc": invalid syntax`)
		}
	})

	t.Run("exact list at N shows the state at N", func(t *testing.T) {
		got := rvListGet(t, n, c, url.Values{"resourceVersion": {N}, "resourceVersionMatch": {"Exact"}})
		if got.code != http.StatusOK || got.rv != N {
			t.Fatalf("%d rv %s: %s", got.code, got.rv, got.res.body)
		}
		m := map[string]string{}
		for _, it := range got.items {
			m[it.key] = it.rv
		}
		if m["ns/b"] != bAtN {
			t.Errorf("ns/b at N has resourceVersion %q, want %s (before its update)", m["ns/b"], bAtN)
		}
		if _, ok := m["ns/c"]; !ok {
			t.Error("ns/c, deleted after N, is missing from the list at N")
		}
		for _, k := range []string{"ns/e", "ns-a/c"} {
			if _, ok := m[k]; ok {
				t.Errorf("%s, created after N, is in the list at N", k)
			}
		}
		for _, it := range got.items {
			if rvNum(t, it.rv) > rvNum(t, N) {
				t.Errorf("%s has resourceVersion %s, newer than the list's %s", it.key, it.rv, N)
			}
		}
	})

	// get: unset is the latest, "0" any, N not older than N.
	t.Run("get", func(t *testing.T) {
		get := func(ns, name, rv string) httpResult {
			u := n.url() + "/api/v1/namespaces/" + ns + "/configmaps/" + name
			if rv != "unset" {
				u += "?resourceVersion=" + rv
			}
			return do(t, c, http.MethodGet, u, map[string]string{"Accept": "application/json"}, nil)
		}
		cur, err := cs.CoreV1().ConfigMaps("ns").Get(ctx, "b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, rv := range []string{"unset", "0", N} {
			r := get("ns", "b", rv)
			if r.code != http.StatusOK {
				t.Fatalf("get rv=%s: %d %s", rv, r.code, r.body)
			}
			var o corev1.ConfigMap
			if err := json.Unmarshal(r.body, &o); err != nil {
				t.Fatal(err)
			}
			// Not older than N is the latest here: the update after N shows.
			if o.ResourceVersion != cur.ResourceVersion || o.Data["v"] != "2" {
				t.Fatalf("get rv=%s: resourceVersion %s data %v, want %s with the update", rv, o.ResourceVersion, o.Data, cur.ResourceVersion)
			}
		}
		// Deleted after N: not found at "not older than N".
		for _, rv := range []string{"unset", "0", N} {
			wantStatus(t, get("ns", "c", rv), http.StatusNotFound, metav1.StatusReasonNotFound, `configmaps "c" not found`)
		}
		// Created after N: found.
		if r := get("ns", "e", N); r.code != http.StatusOK {
			t.Fatalf("get of an object created after N at rv=N: %d %s", r.code, r.body)
		}
	})

	t.Run("a resourceVersion far in the future is 504 Too large resource version", func(t *testing.T) {
		future := strconv.FormatUint(latestWrite+1_000_000, 10)
		reqs := map[string]string{
			"get":                          "/api/v1/namespaces/ns/configmaps/a?resourceVersion=" + future,
			"list":                         "/api/v1/configmaps?resourceVersion=" + future,
			"list NotOlderThan":            "/api/v1/configmaps?resourceVersionMatch=NotOlderThan&resourceVersion=" + future,
			"list Exact":                   "/api/v1/configmaps?resourceVersionMatch=Exact&resourceVersion=" + future,
			"list legacy exact with limit": "/api/v1/namespaces/ns/configmaps?limit=2&resourceVersion=" + future,
		}
		for name, path := range reqs {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				r := do(t, c, http.MethodGet, n.url()+path, map[string]string{"Accept": "application/json"}, nil)
				st := wantStatus(t, r, http.StatusGatewayTimeout, metav1.StatusReasonTimeout, "Timeout: Too large resource version: "+future+", current: *")
				if ra := r.header.Get("Retry-After"); ra != "1" {
					t.Errorf("Retry-After %q, want 1", ra)
				}
				if st.Details == nil || len(st.Details.Causes) != 1 || st.Details.Causes[0].Type != metav1.CauseTypeResourceVersionTooLarge ||
					st.Details.Causes[0].Message != "Too large resource version" || st.Details.RetryAfterSeconds != 1 {
					t.Errorf("details %+v, want one ResourceVersionTooLarge cause and retryAfterSeconds 1", st.Details)
				}
			})
		}
	})
}

// TestListPaging checks paging end to end: every page from one snapshot
// while writes happen between pages, remainingItemCount, and order.
func TestListPaging(t *testing.T) {
	// No controllers: the test counts exactly the objects it writes.
	n := startNode(t, "--controllers=false")
	ctx := context.Background()
	cs := n.clientset()
	c := n.httpClient()
	for _, ns := range []string{"ns", "ns-a"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 6; i++ {
			lbl := map[string]string{"pg": "yes"}
			if i%3 == 1 {
				lbl["pg"] = "no"
			}
			o := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p%d", i), Labels: lbl}}
			if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, o, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}

	t.Run("pages come from one snapshot while writes happen between pages", func(t *testing.T) {
		const limit = 3
		first := rvListGet(t, n, c, url.Values{"limit": {strconv.Itoa(limit)}})
		if first.code != http.StatusOK || first.cont == "" {
			t.Fatalf("first page: %d continue %q %s", first.code, first.cont, first.res.body)
		}
		snapshot := rvListGet(t, n, c, url.Values{"resourceVersion": {first.rv}, "resourceVersionMatch": {"Exact"}})
		if snapshot.code != http.StatusOK || snapshot.rv != first.rv {
			t.Fatalf("exact list at the first page's version: %d rv %s %s", snapshot.code, snapshot.rv, snapshot.res.body)
		}
		items := append([]rvItem{}, first.items...)
		seen := map[string]bool{}
		for _, it := range first.items {
			seen[it.key] = true
		}
		page := first
		for i := 0; page.cont != ""; i++ {
			// Between pages: a create, an update and a delete among the
			// items not listed yet, in both namespaces.
			w := fmt.Sprintf("w%d", i)
			for _, ns := range []string{"ns", "ns-a"} {
				if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "p5-" + w}}, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for _, k := range []string{"ns/p4", "ns-a/p4", "ns-a/p2"} {
				ns, name, _ := strings.Cut(k, "/")
				o, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					continue // deleted by an earlier round
				}
				o.Data = map[string]string{"round": w}
				if _, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, o, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if i == 0 {
				if err := cs.CoreV1().ConfigMaps("ns-a").Delete(ctx, "p5", metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			page = rvListGet(t, n, c, url.Values{"limit": {strconv.Itoa(limit)}, "continue": {page.cont}})
			if page.code != http.StatusOK {
				t.Fatalf("page %d: %d %s", i+1, page.code, page.res.body)
			}
			if page.rv != first.rv {
				t.Fatalf("page %d collection resourceVersion %s, first page %s", i+1, page.rv, first.rv)
			}
			if len(page.items) > limit {
				t.Fatalf("page %d has %d items", i+1, len(page.items))
			}
			for _, it := range page.items {
				if seen[it.key] {
					t.Fatalf("%s listed twice", it.key)
				}
				seen[it.key] = true
			}
			items = append(items, page.items...)
			if i > 50 {
				t.Fatal("paging does not end")
			}
		}
		if !reflect.DeepEqual(items, snapshot.items) {
			t.Fatalf("paged items %v\nwant the first page's snapshot %v", items, snapshot.items)
		}
		// And the writes are there for a new list.
		now := rvListGet(t, n, c, url.Values{})
		if reflect.DeepEqual(now.items, snapshot.items) || rvNum(t, now.rv) <= rvNum(t, first.rv) {
			t.Fatalf("a new list does not see the writes made while paging")
		}
	})

	t.Run("remainingItemCount", func(t *testing.T) {
		all := rvListGet(t, n, c, url.Values{})
		total := len(all.items)
		first := rvListGet(t, n, c, url.Values{"limit": {"2"}})
		if first.remaining == nil || *first.remaining != int64(total-2) {
			t.Fatalf("first page remainingItemCount %s, want %d", countStr(first.remaining), total-2)
		}
		if got := rvPages(t, n, c, first, 2, false, nil); !reflect.DeepEqual(got, all.items) {
			t.Fatalf("pages %v, want %v", keysOf(got), keysOf(all.items))
		}
		// One page holding everything: no continue, no count.
		whole := rvListGet(t, n, c, url.Values{"limit": {strconv.Itoa(total)}})
		if whole.cont != "" || whole.remaining != nil || len(whole.items) != total {
			t.Fatalf("limit = item count: continue %q remaining %s items %d", whole.cont, countStr(whole.remaining), len(whole.items))
		}
		for _, sel := range []url.Values{{"labelSelector": {"pg=yes"}}, {"fieldSelector": {"metadata.name!=p0"}}} {
			q := url.Values{"limit": {"2"}}
			for k, v := range sel {
				q[k] = v
			}
			want := rvListGet(t, n, c, sel)
			first := rvListGet(t, n, c, q)
			if first.code != http.StatusOK || first.cont == "" {
				t.Fatalf("%s: %d continue %q %s", q.Encode(), first.code, first.cont, first.res.body)
			}
			if got := rvPages(t, n, c, first, 2, true, sel); !reflect.DeepEqual(got, want.items) {
				t.Fatalf("%s: pages %v, want %v", q.Encode(), keysOf(got), keysOf(want.items))
			}
		}
	})

	t.Run("items are ordered by namespace then name", func(t *testing.T) {
		for _, q := range []url.Values{{}, {"limit": {"1"}}, {"resourceVersion": {"0"}}} {
			first := rvListGet(t, n, c, q)
			items := first.items
			if first.cont != "" {
				items = rvPages(t, n, c, first, 1, false, nil)
			}
			var ours []string
			for _, k := range keysOf(items) {
				if strings.HasPrefix(k, "ns/") || strings.HasPrefix(k, "ns-a/") {
					ours = append(ours, k)
				}
			}
			nsEnd := 0
			for i, k := range ours {
				if strings.HasPrefix(k, "ns/") {
					nsEnd = i + 1
				}
			}
			for i, k := range ours {
				if (i < nsEnd) != strings.HasPrefix(k, "ns/") {
					t.Fatalf("%s: namespace ns is not listed before ns-a: %v", q.Encode(), ours)
				}
				if i > 0 && i != nsEnd && ours[i-1] >= k {
					t.Fatalf("%s: %s listed after %s: %v", q.Encode(), k, ours[i-1], ours)
				}
			}
			if nsEnd == 0 || nsEnd == len(ours) {
				t.Fatalf("%s: want items of both namespaces: %v", q.Encode(), ours)
			}
		}
	})
}
