package chaos

import (
	"bytes"
	"net/http"
	"sync"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/rest"
)

// followInterval is how often a following client looks at its node's
// kubeconfig again; retireAfter how long the transport of credentials it
// replaced keeps serving the requests (watches) it had started before its
// idle connections are closed.
const (
	followInterval = 500 * time.Millisecond
	retireAfter    = 30 * time.Second
)

// followConfig is an admin client configuration for node name whose
// credentials follow what the target's kubeconfig for it says, as a
// client handed the new bundle during a rotation of the cluster CA would:
// new requests use the kubeconfig's certificate and CAs of the moment,
// requests already started finish on the connections they have.
func followConfig(t Target, name string) (*rest.Config, error) {
	cfg, err := t.Config(name)
	if err != nil {
		return nil, err
	}
	ft := &following{load: func() (*rest.Config, error) { return t.Config(name) }}
	if err := ft.use(cfg); err != nil {
		return nil, err
	}
	return &rest.Config{Host: cfg.Host, Transport: ft, Timeout: cfg.Timeout, UserAgent: cfg.UserAgent}, nil
}

// following is a RoundTripper over the transport of the credentials of
// the moment.
type following struct {
	load func() (*rest.Config, error)

	mu      sync.Mutex
	creds   []byte
	cur     http.RoundTripper
	checked time.Time
}

func credsOf(cfg *rest.Config) []byte {
	return bytes.Join([][]byte{cfg.CAData, cfg.CertData, cfg.KeyData, []byte(cfg.CAFile), []byte(cfg.CertFile)}, []byte{0})
}

// use makes cfg's credentials the current ones.
func (f *following) use(cfg *rest.Config) error {
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		return err
	}
	f.mu.Lock()
	old := f.cur
	f.cur, f.creds, f.checked = rt, credsOf(cfg), time.Now()
	f.mu.Unlock()
	if old != nil {
		time.AfterFunc(retireAfter, func() { utilnet.CloseIdleConnectionsFor(old) })
	}
	return nil
}

func (f *following) current() http.RoundTripper {
	f.mu.Lock()
	cur, due := f.cur, time.Since(f.checked) > followInterval
	if due {
		f.checked = time.Now()
	}
	creds := f.creds
	f.mu.Unlock()
	if !due {
		return cur
	}
	cfg, err := f.load()
	if err != nil || bytes.Equal(credsOf(cfg), creds) {
		return cur
	}
	if f.use(cfg) != nil {
		return cur
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}

func (f *following) RoundTrip(req *http.Request) (*http.Response, error) {
	return f.current().RoundTrip(req)
}

// WrappedRoundTripper lets client-go reach the transport of the moment
// (utilnet.RoundTripperWrapper), to cancel a request that timed out.
func (f *following) WrappedRoundTripper() http.RoundTripper {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cur
}
