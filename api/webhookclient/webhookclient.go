package webhookclient

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	webhookutil "k8s.io/apiserver/pkg/util/webhook"
	"k8s.io/client-go/rest"
)

// NoServiceReference is the reason a webhook that names a Service is
// refused: a node reaches a webhook only at the URL its configuration
// gives.
const NoServiceReference = "trustplane cannot reach Services; give the webhook's address as clientConfig.url"

// ErrNoService: a webhook names a Service (NoServiceReference).
var ErrNoService = errors.New(NoServiceReference)

// ErrResponseTooLarge: a webhook answered with more than the limit.
var ErrResponseTooLarge = errors.New("the webhook's response is larger than the node accepts")

// DefaultMaxResponseBytes is the default limit of a webhook's answer:
// kube-apiserver's limit of a request body (3 MiB), since an answer
// carries at most a patch of one object, which a request could carry.
const DefaultMaxResponseBytes = 3 << 20

// Services is the webhooks' service resolver: it resolves no Service.
// kube's client manager needs one; it dereferences it in net/http's dial
// goroutine, so it must never be nil.
type Services struct{}

func (Services) ResolveEndpoint(namespace, name string, port int32) (*url.URL, error) {
	return nil, fmt.Errorf("service %s/%s:%d: %w", namespace, name, port, ErrNoService)
}

// Limit returns the wrapper of kube's webhook client configurations
// (webhookutil.AuthenticationInfoResolverWrapper) that cuts every answer
// at max bytes.
func Limit(max int64) webhookutil.AuthenticationInfoResolverWrapper {
	return func(delegate webhookutil.AuthenticationInfoResolver) webhookutil.AuthenticationInfoResolver {
		limit := func(cfg *rest.Config, err error) (*rest.Config, error) {
			if err != nil {
				return nil, err
			}
			cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return limitedTransport{rt: rt, max: max} })
			return cfg, nil
		}
		return &webhookutil.AuthenticationInfoResolverDelegator{
			ClientConfigForFunc: func(hostPort string) (*rest.Config, error) {
				return limit(delegate.ClientConfigFor(hostPort))
			},
			ClientConfigForServiceFunc: func(name, namespace string, port int) (*rest.Config, error) {
				return limit(delegate.ClientConfigForService(name, namespace, port))
			},
		}
	}
}

// limitedTransport reads at most max bytes of each response body.
type limitedTransport struct {
	rt  http.RoundTripper
	max int64
}

func (t limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > t.max {
		resp.Body.Close()
		return nil, ErrResponseTooLarge
	}
	resp.Body = &limitedBody{body: resp.Body, left: t.max}
	return resp, nil
}

// limitedBody fails a read that would go past the limit.
type limitedBody struct {
	body io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body that ends exactly at the limit
		// from one that goes on.
		var one [1]byte
		n, err := b.body.Read(one[:])
		if n > 0 {
			return 0, ErrResponseTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.body.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.body.Close() }
