package e2e_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// nextEvent reads one event, failing the test after a bounded wait.
func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch ended early")
		}
		return ev
	case <-time.After(15 * time.Second):
		t.Fatal("no watch event within 15s")
	}
	return watch.Event{}
}

func wantEvent(t *testing.T, w watch.Interface, typ watch.EventType, name string) *corev1.ServiceAccount {
	t.Helper()
	ev := nextEvent(t, w)
	sa, ok := ev.Object.(*corev1.ServiceAccount)
	if ev.Type != typ || !ok || sa.Name != name {
		t.Fatalf("event = %s %#v, want %s %s", ev.Type, ev.Object, typ, name)
	}
	return sa
}

func TestWatch(t *testing.T) {
	t.Parallel() // mostly waits (e2e/doc.go)
	// No controllers: the test counts exactly the objects it writes.
	n := startNode(t, "--controllers=false")
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		cs   *kubernetes.Clientset
	}{{"json", n.clientset()}, {"protobuf", n.protoClientset()}} {
		t.Run("from a resourceVersion gives exactly the later events in order ("+tc.name+")", func(t *testing.T) {
			ns := "w-" + tc.name
			if _, err := tc.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			sas := tc.cs.CoreV1().ServiceAccounts(ns)
			before, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "before"}}, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			a, _ := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, metav1.CreateOptions{})
			a.Labels = map[string]string{"x": "1"}
			a, _ = sas.Update(ctx, a, metav1.UpdateOptions{})
			if err := sas.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			w, err := sas.Watch(ctx, metav1.ListOptions{ResourceVersion: before.ResourceVersion})
			if err != nil {
				t.Fatal(err)
			}
			defer w.Stop()
			wantEvent(t, w, watch.Added, "a")
			if got := wantEvent(t, w, watch.Modified, "a"); got.ResourceVersion != a.ResourceVersion || got.Labels["x"] != "1" {
				t.Fatalf("MODIFIED = rv %s labels %v, want rv %s", got.ResourceVersion, got.Labels, a.ResourceVersion)
			}
			wantEvent(t, w, watch.Deleted, "a")
			// Live events follow the replayed ones without a gap.
			if _, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "live"}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			wantEvent(t, w, watch.Added, "live")
		})
	}

	t.Run("a label selector sees ADDED on entering and DELETED on leaving", func(t *testing.T) {
		sas := n.clientset().CoreV1().ServiceAccounts("default")
		w, err := sas.Watch(ctx, metav1.ListOptions{LabelSelector: "team=blue"})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		sa, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "chameleon"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		sa.Labels = map[string]string{"team": "blue"}
		if sa, err = sas.Update(ctx, sa, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		wantEvent(t, w, watch.Added, "chameleon")
		sa.Labels = map[string]string{"team": "red"}
		updated, err := sas.Update(ctx, sa, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := wantEvent(t, w, watch.Deleted, "chameleon"); got.ResourceVersion != updated.ResourceVersion {
			t.Fatalf("DELETED on leaving the selector has rv %s, want the change's %s", got.ResourceVersion, updated.ResourceVersion)
		}
	})

	t.Run("an informer stays in sync", func(t *testing.T) {
		cs := n.clientset()
		factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace("default"))
		inf := factory.Core().V1().ServiceAccounts().Informer()
		var mu sync.Mutex
		seen := map[string]string{}
		inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(o any) { mu.Lock(); seen[o.(*corev1.ServiceAccount).Name] = "added"; mu.Unlock() },
			UpdateFunc: func(_, o any) { mu.Lock(); seen[o.(*corev1.ServiceAccount).Name] = "updated"; mu.Unlock() },
			DeleteFunc: func(o any) {
				if sa, ok := o.(*corev1.ServiceAccount); ok {
					mu.Lock()
					seen[sa.Name] = "deleted"
					mu.Unlock()
				}
			},
		})
		stop := make(chan struct{})
		defer close(stop)
		factory.Start(stop)
		if !cache.WaitForCacheSync(stop, inf.HasSynced) {
			t.Fatal("informer did not sync")
		}
		sas := cs.CoreV1().ServiceAccounts("default")
		for i := 0; i < 20; i++ {
			if _, err := sas.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("inf-%d", i)}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 20; i += 2 {
			if err := sas.Delete(ctx, fmt.Sprintf("inf-%d", i), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(15 * time.Second)
		for {
			mu.Lock()
			ok := true
			for i := 0; i < 20; i++ {
				want := "added"
				if i%2 == 0 {
					want = "deleted"
				}
				ok = ok && seen[fmt.Sprintf("inf-%d", i)] == want
			}
			mu.Unlock()
			if ok {
				break
			}
			if time.Now().After(deadline) {
				mu.Lock()
				t.Fatalf("informer view after 15s: %v", seen)
			}
			time.Sleep(50 * time.Millisecond)
		}
		list, err := sas.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(inf.GetStore().List()), len(list.Items); got != want {
			t.Fatalf("informer holds %d service accounts, the server lists %d", got, want)
		}
	})

	t.Run("sendInitialEvents ends the initial events with an annotated bookmark", func(t *testing.T) {
		yes := true
		w, err := n.clientset().CoreV1().Namespaces().Watch(ctx, metav1.ListOptions{
			SendInitialEvents: &yes, AllowWatchBookmarks: true, ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		added := 0
		for {
			ev := nextEvent(t, w)
			if ev.Type == watch.Added {
				added++
				continue
			}
			ns, ok := ev.Object.(*corev1.Namespace)
			if ev.Type != watch.Bookmark || !ok || ns.Annotations["k8s.io/initial-events-end"] != "true" || ns.ResourceVersion == "" {
				t.Fatalf("after %d ADDED: %s %#v, want the initial-events-end bookmark", added, ev.Type, ev.Object)
			}
			// client-go 1.33 rebuilds the list from this blueprint, and
			// falls back to LIST without it.
			blueprint, err := base64.StdEncoding.DecodeString(ns.Annotations[metav1.InitialEventsListBlueprintAnnotationKey])
			if err != nil {
				t.Fatal(err)
			}
			// It is encoded as the stream's objects are (protobuf here).
			obj, gvk, err := scheme.Codecs.UniversalDeserializer().Decode(blueprint, nil, nil)
			if list, ok := obj.(*corev1.NamespaceList); err != nil || !ok || len(list.Items) != 0 || gvk.Kind != "NamespaceList" || gvk.Version != "v1" {
				t.Fatalf("list blueprint %q: %v %v", blueprint, gvk, err)
			}
			break
		}
		if added < 3 {
			t.Fatalf("%d initial namespaces, want at least default, kube-system and kube-public", added)
		}
	})

	t.Run("a watch with a timeout gets a bookmark before it ends", func(t *testing.T) {
		timeout := int64(4)
		w, err := n.clientset().CoreV1().ConfigMaps("default").Watch(ctx, metav1.ListOptions{
			ResourceVersion: "0", AllowWatchBookmarks: true, TimeoutSeconds: &timeout,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		for {
			ev, ok := <-w.ResultChan()
			if !ok {
				t.Fatal("the watch ended without a bookmark")
			}
			if ev.Type == watch.Bookmark {
				if cm, ok := ev.Object.(*corev1.ConfigMap); !ok || cm.ResourceVersion == "" {
					t.Fatalf("bookmark object %#v, want a ConfigMap carrying only a resourceVersion", ev.Object)
				}
				return
			}
		}
	})

	t.Run("kubectl get -w prints changes", func(t *testing.T) {
		var out string
		done := make(chan struct{})
		go func() {
			defer close(done)
			out, _ = n.kubectl("get", "configmaps", "-w", "--request-timeout=8s")
		}()
		time.Sleep(2 * time.Second)
		n.mustKubectl("create", "configmap", "watched", "--from-literal=a=b")
		<-done
		if !strings.Contains(out, "watched") || !strings.Contains(out, "NAME") {
			t.Fatalf("kubectl get -w printed:\n%s", out)
		}
	})
}

// gatesWith enables the client-go features named, and leaves the others
// at their defaults.
type gatesWith struct {
	defaults clientfeatures.Gates
	on       map[clientfeatures.Feature]bool
}

func (g gatesWith) Enabled(f clientfeatures.Feature) bool { return g.on[f] || g.defaults.Enabled(f) }

// TestWatchListTypedList: client-go 1.33's typed List, with its
// WatchListClient feature, lists by a streaming watch (sendInitialEvents)
// and rebuilds the list from the bookmark's blueprint; without the
// blueprint it falls back to a plain LIST. The list must come from the
// stream alone.
func TestWatchListTypedList(t *testing.T) {
	n := startNode(t, "--controllers=false")
	n.trustplaneOnly(t, "streaming lists (sendInitialEvents) are always served; kube-apiserver v1.33 serves them only with the WatchList feature gate, off by default")
	n.scrub(t, "configmap/a", "configmap/b", "configmap/c")
	ctx := context.Background()
	for _, name := range []string{"a", "b", "c"} {
		if _, err := n.clientset().CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	defaults := clientfeatures.FeatureGates()
	clientfeatures.ReplaceFeatureGates(gatesWith{defaults: defaults, on: map[clientfeatures.Feature]bool{clientfeatures.WatchListClient: true}})
	t.Cleanup(func() { clientfeatures.ReplaceFeatureGates(defaults) })

	var (
		mu       sync.Mutex
		requests []string
	)
	cfg := n.restConfig()
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
			mu.Lock()
			requests = append(requests, req.URL.RawQuery)
			mu.Unlock()
			return rt.RoundTrip(req)
		})
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.CoreV1().ConfigMaps("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cm := range list.Items {
		names = append(names, cm.Name)
	}
	if strings.Join(names, ",") != "a,b,c" || list.ResourceVersion == "" {
		t.Fatalf("listed %v at %q", names, list.ResourceVersion)
	}
	mu.Lock()
	if len(requests) != 1 || !strings.Contains(requests[0], "sendInitialEvents=true") {
		mu.Unlock()
		t.Fatalf("requests %q, want one streaming watch-list request and no fallback LIST", requests)
	}
	requests = nil
	mu.Unlock()

	// Asked as a Table first (the upstream spec "falls backs to supported
	// content type when receiving resources as Tables was requested"): a
	// streaming list is never a Table, so the Accept header's JSON serves
	// it. Served as a Table, client-go waited forever for a bookmark of
	// the list's kind; the deadline turns such a hang into a failure.
	tableCfg := dynamic.ConfigFor(cfg)
	tableCfg.AcceptContentTypes = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
	tableCfg.GroupVersion = &corev1.SchemeGroupVersion
	rc, err := rest.RESTClientFor(tableCfg)
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ulist, err := dynamic.New(rc).Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace("default").List(dctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("a streaming list asked as a Table first: %v", err)
	}
	names = nil
	for _, it := range ulist.Items {
		names = append(names, it.GetName())
	}
	if strings.Join(names, ",") != "a,b,c" {
		t.Fatalf("listed %v", names)
	}
	mu.Lock()
	if len(requests) != 1 || !strings.Contains(requests[0], "sendInitialEvents=true") {
		t.Errorf("requests %q, want one streaming watch-list request", requests)
	}
	mu.Unlock()
	// As a Table only: 406, as kube answers.
	r := do(t, n.httpClient(), http.MethodGet, n.url()+"/api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=5",
		map[string]string{"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}, nil)
	if r.code != http.StatusNotAcceptable {
		t.Fatalf("a streaming list as a Table only: %d %s, want 406", r.code, r.body)
	}

	// The streaming list's parameter rules, with kube's 422s.
	for q, msg := range map[string]string{
		"watch=1&sendInitialEvents=true&allowWatchBookmarks=true":                              "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
		"sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0":           "sendInitialEvents is forbidden for list",
		"watch=1&resourceVersionMatch=NotOlderThan&resourceVersion=0&allowWatchBookmarks=true": "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
	} {
		st := failureStatus(t, do(t, n.httpClient(), http.MethodGet, n.url()+"/api/v1/namespaces/default/configmaps?"+q, nil, nil))
		if st.Code != http.StatusUnprocessableEntity || !strings.Contains(st.Message, msg) {
			t.Errorf("?%s: %d %q, want 422 with %q", q, st.Code, st.Message, msg)
		}
	}

	// The final bookmark: the list's kind and version, the applied
	// resourceVersion, the end annotation, and the blueprint of the list
	// (what client-go rebuilds it from), in the stream's encoding.
	r = do(t, n.httpClient(), http.MethodGet, n.url()+"/api/v1/namespaces/default/configmaps?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=2",
		map[string]string{"Accept": "application/json"}, nil)
	var last struct {
		Type   string `json:"type"`
		Object struct {
			Kind, APIVersion string
			Metadata         metav1.ObjectMeta `json:"metadata"`
		} `json:"object"`
	}
	for _, line := range strings.Split(strings.TrimSpace(string(r.body)), "\n") {
		var ev struct{ Type string }
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == "BOOKMARK" {
			json.Unmarshal([]byte(line), &last)
			break
		}
	}
	md := last.Object.Metadata
	if last.Type != "BOOKMARK" || last.Object.Kind != "ConfigMap" || last.Object.APIVersion != "v1" || md.ResourceVersion == "" || md.Annotations["k8s.io/initial-events-end"] != "true" {
		t.Fatalf("the initial events' bookmark: %+v\n%s", last, r.body)
	}
	bp, err := base64.StdEncoding.DecodeString(md.Annotations[metav1.InitialEventsListBlueprintAnnotationKey])
	var blueprint struct{ Kind, APIVersion string }
	if err != nil || json.Unmarshal(bp, &blueprint) != nil || blueprint.Kind != "ConfigMapList" || blueprint.APIVersion != "v1" {
		t.Fatalf("the bookmark's list blueprint %q (%v)", bp, err)
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }
