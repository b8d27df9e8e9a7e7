package api

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/watchcache"
)

// TestSharedObjectsNotModified: the objects the storage layer shares (one
// decoded object per stored version, which the watch cache hands to every
// watcher and lists read directly) survive being encoded from many
// goroutines at once in every format a watch or a list can ask for: JSON,
// YAML, protobuf, Table and PartialObjectMetadata. Under -race any write
// to a shared object (kube's versioning codec setting the kind of what it
// encodes, a resourceVersion set in place) is a reported race; without it,
// the comparison with a deep copy taken before catches a lasting change.
// Several servers, each with its own encoded-event cache, watch the same
// cache, so the same object really is encoded concurrently.
func TestSharedObjectsNotModified(t *testing.T) {
	e, err := buildFuzzEnv(true)
	if err != nil {
		t.Fatal(err)
	}
	reg := e.s.reg
	ctx := genericapirequest.WithUser(context.Background(), fuzzAdmin)

	// Every stored object's shared decoded version (what a watch from 0
	// hands out as ADDED events), and a deep copy of it.
	type sharedObj struct {
		name   string
		shared runtime.Object
		before runtime.Object
	}
	sharedOf := func(st *registry.Store) map[string]runtime.Object {
		wctx, cancel := context.WithCancel(ctx)
		defer cancel()
		zero, yes := "0", true
		w, err := st.Watch(wctx, &metainternalversion.ListOptions{ResourceVersion: zero, AllowWatchBookmarks: true, SendInitialEvents: &yes, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		out := map[string]runtime.Object{}
		for ev := range w.Events() {
			if ev.Type == watchcache.Bookmark {
				break
			}
			o, err := ev.Object()
			if err != nil {
				t.Fatal(err)
			}
			out[ev.KV.Key.String()] = o.(runtime.Object)
		}
		return out
	}
	var objs []sharedObj
	for _, st := range reg.Stores() {
		for name, obj := range sharedOf(st) {
			objs = append(objs, sharedObj{name: name, shared: obj, before: obj.DeepCopyObject()})
		}
	}
	if len(objs) < 8 {
		t.Fatalf("only %d stored objects", len(objs))
	}

	var servers []*Server
	for range 4 {
		cfg := DefaultConfig()
		cfg.TLS = e.s.cfg.TLS
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		s, err := New(cfg, reg)
		if err != nil {
			t.Fatal(err)
		}
		servers = append(servers, s)
	}
	// A watch's items are PartialObjectMetadata, a list's a
	// PartialObjectMetadataList; YAML has no watch stream (406).
	accepts := map[string]string{
		"json":        "application/json",
		"yaml":        "application/yaml",
		"protobuf":    "application/vnd.kubernetes.protobuf",
		"table":       "application/json;as=Table;v=v1;g=meta.k8s.io",
		"partial":     "application/json;as=PartialObjectMetadata;v=v1;g=meta.k8s.io",
		"partialList": "application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io",
	}
	paths := []string{
		"/api/v1/namespaces", "/api/v1/configmaps", "/api/v1/secrets", "/api/v1/serviceaccounts",
		"/api/v1/pods", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
		"/apis/certificates.k8s.io/v1/certificatesigningrequests",
	}
	serve := func(s *Server, path, accept string, timeout time.Duration) *httptest.ResponseRecorder {
		ctx, cancel := context.WithTimeout(genericapirequest.WithUser(context.Background(), fuzzAdmin), timeout)
		defer cancel()
		req := httptest.NewRequest(http.MethodGet, path, nil).WithContext(ctx)
		req.Header.Set("Accept", accept)
		rec := httptest.NewRecorder()
		s.serveResource(rec, req)
		return rec
	}

	var wg sync.WaitGroup
	errs := make(chan error, 1024)
	for round := range 3 {
		for _, s := range servers {
			for name, accept := range accepts {
				for _, p := range paths {
					wg.Add(2)
					// A watch from resourceVersion 0 starts with the
					// current objects as ADDED events; it ends with the
					// request's context.
					go func() {
						defer wg.Done()
						if name == "partialList" {
							return
						}
						rec := serve(s, p+"?watch=true&resourceVersion=0&allowWatchBookmarks=true", accept, 2*time.Second)
						if rec.Code != http.StatusOK && rec.Code != http.StatusNotAcceptable {
							errs <- fmt.Errorf("round %d: watch %s as %s: %d %s", round, p, name, rec.Code, rec.Body.String())
						} else if body := rec.Body.String(); rec.Code == http.StatusOK && (strings.Contains(body, `"ERROR"`) || !strings.Contains(body, "ADDED")) {
							errs <- fmt.Errorf("round %d: watch %s as %s: no events, or an error: %.300q", round, p, name, body)
						}
					}()
					go func() {
						defer wg.Done()
						if name == "partial" {
							return
						}
						rec := serve(s, p+"?resourceVersion=0", accept, 5*time.Second)
						if rec.Code != http.StatusOK && rec.Code != http.StatusNotAcceptable {
							errs <- fmt.Errorf("round %d: list %s as %s: %d %s", round, p, name, rec.Code, rec.Body.String())
						}
					}()
				}
			}
		}
		wg.Wait()
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	again := map[string]runtime.Object{}
	for _, st := range reg.Stores() {
		maps.Copy(again, sharedOf(st))
	}
	for _, o := range objs {
		if !reflect.DeepEqual(o.shared, o.before) {
			t.Errorf("shared object of %s was modified:\nbefore %#v\nafter  %#v", o.name, o.before, o.shared)
		}
		if again[o.name] != o.shared {
			t.Errorf("%s: the storage layer no longer hands out the same shared object", o.name)
		}
	}
}
