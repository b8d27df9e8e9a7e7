package api

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestConcurrentAppliesShareNothing: applies of one ConfigMap by several
// managers at once, through the handlers, with reads between them. Each
// apply reads the shared decoded object of the current version from the
// storage's cache (as a copy) and merges into it; run with -race, a write
// to a shared object, or to anything the FieldManager shares between
// requests, is a data race.
func TestConcurrentAppliesShareNothing(t *testing.T) {
	e := newFuzzEnv(t)
	defer e.reset(t)
	const path = "/api/v1/namespaces/fuzz/configmaps/race"
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 10 {
				body := fmt.Appendf(nil, `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"race","namespace":"fuzz","labels":{"m%d":"x"}},"data":{"k%d":"%d"}}`, g, g, i)
				rec := e.do(http.MethodPatch, path+fmt.Sprintf("?fieldManager=m%d", g), "application/apply-patch+yaml", body)
				if rec.Code != http.StatusOK && rec.Code != http.StatusCreated {
					t.Errorf("apply: %d %s", rec.Code, rec.Body)
					return
				}
				if rec := e.do(http.MethodGet, path, "", nil); rec.Code != http.StatusOK {
					t.Errorf("get: %d %s", rec.Code, rec.Body)
					return
				}
			}
		}()
	}
	wg.Wait()
	rec := e.do(http.MethodGet, path, "", nil)
	for g := range 4 {
		if want := fmt.Sprintf(`"k%d":"9"`, g); !strings.Contains(rec.Body.String(), want) {
			t.Fatalf("the object lost m%d's last apply (%s): %s", g, want, rec.Body)
		}
	}
}
