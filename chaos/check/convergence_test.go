package check

import (
	"testing"

	"github.com/trustplane/trustplane/chaos/history"
)

func TestConvergence(t *testing.T) {
	setFinal := func(h *history.History, node string, f func(st *history.State)) {
		st := h.Final[node]
		f(&st)
		h.Final[node] = st
	}
	runCases(t, Convergence, []checkerCase{
		{name: "identical final states agreeing with the log pass"},
		{name: "diverged ConfigMap", want: "configmap a: node n1 has \"v2\"@4, node n3 has \"v1\"@2",
			mutate: func(t *testing.T, h *history.History) {
				setFinal(h, "n3", func(st *history.State) { st.ConfigMaps["a"] = history.Item{Value: "v1", RV: 2} })
			}},
		{name: "diverged node is also behind the log", want: "node n3: configmap a is \"v1\"@2, but the log's last entry is rv 4",
			mutate: func(t *testing.T, h *history.History) {
				setFinal(h, "n3", func(st *history.State) { st.ConfigMaps["a"] = history.Item{Value: "v1", RV: 2} })
			}},
		{name: "diverged CSR", want: "csr c1: node n1 has digest \"d1\"",
			mutate: func(t *testing.T, h *history.History) {
				setFinal(h, "n2", func(st *history.State) { st.CSRs["c1"] = "" })
			}},
		{name: "every node still holds a deleted key", want: "node n1: configmap b is \"w1\"@5, but the log deleted it at rv 6",
			mutate: func(t *testing.T, h *history.History) {
				for _, n := range h.Nodes {
					setFinal(h, n, func(st *history.State) { st.ConfigMaps["b"] = history.Item{Value: "w1", RV: 5} })
				}
			}},
		{name: "every node lost a key the log holds", want: "node n1: configmap a is absent, but the log's last entry is rv 4",
			mutate: func(t *testing.T, h *history.History) {
				for _, n := range h.Nodes {
					setFinal(h, n, func(st *history.State) { delete(st.ConfigMaps, "a") })
				}
			}},
		{name: "a node that cannot be read at the end", want: "node n2: final state could not be read: connection refused",
			mutate: func(t *testing.T, h *history.History) {
				setFinal(h, "n2", func(st *history.State) { *st = history.State{Err: "connection refused"} })
			}},
		{name: "a node with no final state", want: "node n3: no final state recorded",
			mutate: func(t *testing.T, h *history.History) { delete(h.Final, "n3") }},
	})
}

func TestConvergenceSkipsWhenNoNodeReadable(t *testing.T) {
	h := baseHistory()
	for n := range h.Final {
		h.Final[n] = history.State{Err: "down"}
	}
	if r := Convergence(h); r.OK || r.Skipped == "" || len(r.Violations) != 3 {
		t.Fatalf("want skipped, not OK, with 3 violations; got %s %q", r, r.Violations)
	}
}
