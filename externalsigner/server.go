package externalsigner

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	jose "gopkg.in/go-jose/go-jose.v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	v1alpha1 "k8s.io/externaljwt/apis/v1alpha1"
	"k8s.io/kubernetes/pkg/serviceaccount"

	"github.com/trustplane/trustplane/api/jwtsign"
)

// Defaults of Config.
const (
	DefaultTimeout            = 5 * time.Second
	DefaultRefreshHint        = time.Minute
	DefaultMaxTokenExpiration = 24 * time.Hour
	// minMaxTokenExpiration is kube's floor for Metadata's answer.
	minMaxTokenExpiration = 10 * time.Minute
	// maxAnswerBytes bounds what is read of any trustplane answer.
	maxAnswerBytes = 1 << 20
)

// Config is what the sidecar is built from; cmd/ fills it from flags.
type Config struct {
	// REST reaches trustplane with the sidecar's own identity.
	REST *rest.Config
	// Timeout bounds each call to trustplane.
	Timeout time.Duration
	// RefreshHint is how often kube-apiserver should fetch the keys again.
	RefreshHint time.Duration
	// MaxTokenExpiration is Metadata's answer: the longest token the API
	// server may ask for (trustplane refuses longer ones than its own
	// --service-account-max-token-expiration, a year without it).
	MaxTokenExpiration time.Duration
}

// Signer implements kube's ExternalJWTSigner over the trustplane API.
type Signer struct {
	v1alpha1.UnimplementedExternalJWTSignerServer
	cfg    Config
	client *http.Client
	base   string
}

// New builds a Signer.
func New(cfg Config) (*Signer, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.RefreshHint <= 0 {
		cfg.RefreshHint = DefaultRefreshHint
	}
	if cfg.MaxTokenExpiration == 0 {
		cfg.MaxTokenExpiration = DefaultMaxTokenExpiration
	}
	if cfg.MaxTokenExpiration < minMaxTokenExpiration {
		return nil, fmt.Errorf("max token expiration %v: kube requires at least %v", cfg.MaxTokenExpiration, minMaxTokenExpiration)
	}
	client, err := rest.HTTPClientFor(cfg.REST)
	if err != nil {
		return nil, err
	}
	client.Timeout = cfg.Timeout
	return &Signer{cfg: cfg, client: client, base: strings.TrimSuffix(cfg.REST.Host, "/")}, nil
}

// Serve listens on the unix socket path (replacing a stale socket file)
// and serves until ctx ends.
func (s *Signer) Serve(ctx context.Context, path string) error {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("%s exists and is not a socket", path)
		}
		if err := os.Remove(path); err != nil {
			return err
		}
	}
	l, err := listenPrivate(path)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	v1alpha1.RegisterExternalJWTSignerServer(srv, s)
	go func() {
		<-ctx.Done()
		srv.GracefulStop()
	}()
	return srv.Serve(l)
}

// Sign has trustplane sign the claims.
func (s *Signer) Sign(ctx context.Context, req *v1alpha1.SignJWTRequest) (*v1alpha1.SignJWTResponse, error) {
	body, _ := json.Marshal(jwtsign.Request{Claims: req.Claims})
	var out jwtsign.Response
	if err := s.call(ctx, http.MethodPost, jwtsign.Path, "application/json", body, &out); err != nil {
		return nil, err
	}
	return &v1alpha1.SignJWTResponse{Header: out.Header, Signature: out.Signature}, nil
}

// FetchKeys returns every key trustplane verifies with, PKIX-encoded.
func (s *Signer) FetchKeys(ctx context.Context, _ *v1alpha1.FetchKeysRequest) (*v1alpha1.FetchKeysResponse, error) {
	var set jose.JSONWebKeySet
	if err := s.call(ctx, http.MethodGet, serviceaccount.JWKSPath, "application/jwk-set+json", nil, &set); err != nil {
		return nil, err
	}
	resp := &v1alpha1.FetchKeysResponse{DataTimestamp: timestamppb.Now(), RefreshHintSeconds: int64(s.cfg.RefreshHint / time.Second)}
	for _, k := range set.Keys {
		der, err := x509.MarshalPKIXPublicKey(k.Key)
		if err != nil || k.KeyID == "" {
			return nil, status.Errorf(codes.Internal, "trustplane's key set holds a key that cannot be used (kid %q)", k.KeyID)
		}
		resp.Keys = append(resp.Keys, &v1alpha1.Key{KeyId: k.KeyID, Key: der})
	}
	if len(resp.Keys) == 0 {
		return nil, status.Error(codes.Unavailable, "trustplane's key set is empty")
	}
	return resp, nil
}

// Metadata is the longest token kube-apiserver may ask for.
func (s *Signer) Metadata(context.Context, *v1alpha1.MetadataRequest) (*v1alpha1.MetadataResponse, error) {
	return &v1alpha1.MetadataResponse{MaxTokenExpirationSeconds: int64(s.cfg.MaxTokenExpiration / time.Second)}, nil
}

// call does one request to trustplane and decodes its JSON answer into
// out; a failure is a gRPC status naming trustplane's answer.
func (s *Signer) call(ctx context.Context, method, path, accept string, body []byte, out any) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, bytes.NewReader(body))
	if err != nil {
		return status.Errorf(codes.Internal, "building the request: %v", err)
	}
	// A Status comes back as JSON whatever was asked for.
	req.Header.Set("Accept", accept+", application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return status.Errorf(codes.Unavailable, "trustplane at %s is unreachable: %v", s.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return status.Errorf(codes.Unavailable, "reading trustplane's answer: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		return refusal(resp.StatusCode, data)
	}
	if err := json.Unmarshal(data, out); err != nil {
		return status.Errorf(codes.Internal, "trustplane's answer is not what %s returns: %v", path, err)
	}
	return nil
}

// refusal is trustplane's Status as a gRPC status of the matching code.
func refusal(code int, body []byte) error {
	msg := http.StatusText(code)
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		msg = st.Message
	}
	c := codes.Unknown
	switch {
	case code == http.StatusUnauthorized:
		c = codes.Unauthenticated
	case code == http.StatusForbidden:
		c = codes.PermissionDenied
	case code == http.StatusBadRequest || code == http.StatusRequestEntityTooLarge:
		c = codes.InvalidArgument
	case code == http.StatusTooManyRequests || code >= 500:
		c = codes.Unavailable
	}
	return status.Error(c, "trustplane refused: "+msg)
}
