package auditlog

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"gopkg.in/natefinch/lumberjack.v2"
	auditinternal "k8s.io/apiserver/pkg/apis/audit"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/audit"
	"k8s.io/apiserver/pkg/audit/policy"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	pluginlog "k8s.io/apiserver/plugin/pkg/audit/log"
)

// Errors Open returns, wrapped with what was wrong.
var (
	// ErrConfig: a flag's value is out of range; nothing was opened.
	ErrConfig = errors.New("auditlog: invalid configuration")
	// ErrPolicy: the policy file could not be read or is not a valid
	// audit.k8s.io Policy; nothing was opened.
	ErrPolicy = errors.New("auditlog: cannot load the audit policy")
	// ErrLogFile: the log file or its directory could not be created.
	ErrLogFile = errors.New("auditlog: cannot open the audit log")
)

// Config is the audit log's configuration, kube-apiserver's flags of the
// same meaning. cmd/trustplane fills it from flags.
type Config struct {
	// Path is the log file (--audit-log-path); "-" is standard output, ""
	// disables the audit log.
	Path string
	// PolicyFile is an audit.k8s.io/v1 Policy (--audit-policy-file).
	// Without one nothing is recorded, as in kube.
	PolicyFile string
	// MaxAge is the days rotated files are kept (--audit-log-maxage; 0:
	// no age limit).
	MaxAge int
	// MaxBackups is the rotated files kept (--audit-log-maxbackup; 0:
	// all of them).
	MaxBackups int
	// MaxSize is the size in megabytes at which the file is rotated
	// (--audit-log-maxsize; 0: lumberjack's default, 100, as in kube).
	MaxSize int
}

// Validate reports a value kube-apiserver refuses too.
func (c *Config) Validate() error {
	for _, f := range []struct {
		flag string
		v    int
	}{{"--audit-log-maxage", c.MaxAge}, {"--audit-log-maxbackup", c.MaxBackups}, {"--audit-log-maxsize", c.MaxSize}} {
		if f.v < 0 {
			return fmt.Errorf("%w: %s %d can't be a negative number", ErrConfig, f.flag, f.v)
		}
	}
	return nil
}

// Log is an opened audit log. A nil Sink (and Policy) records nothing.
type Log struct {
	// Sink writes events: kube's log backend, JSON, audit.k8s.io/v1. It
	// is already Redacting.
	Sink audit.Sink
	// Policy decides each request's level and omitted stages; it is
	// already Capped.
	Policy audit.PolicyRuleEvaluator
	closer io.Closer
}

// Close closes the log file; events processed after it reopen it
// (lumberjack), so close only once the server has stopped.
func (l *Log) Close() error {
	if l == nil || l.closer == nil {
		return nil
	}
	return l.closer.Close()
}

// Open builds the audit log c describes: with no Path or no PolicyFile, a
// Log that records nothing.
func Open(c Config) (*Log, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Path == "" || c.PolicyFile == "" {
		return &Log{}, nil
	}
	p, err := policy.LoadPolicyFromFile(c.PolicyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrPolicy, err)
	}
	w, closer, err := writer(c)
	if err != nil {
		return nil, err
	}
	backend := pluginlog.NewBackend(w, pluginlog.FormatJson, auditv1.SchemeGroupVersion)
	return &Log{Sink: Redacting(ignoreErrors{backend}), Policy: Capped(policy.NewPolicyRuleEvaluator(p)), closer: closer}, nil
}

// writer is kube-apiserver's: standard output for "-", else the file,
// created 0600 in a 0700 directory if absent, behind lumberjack.
func writer(c Config) (io.Writer, io.Closer, error) {
	if c.Path == "-" {
		return os.Stdout, nil, nil
	}
	if err := os.MkdirAll(filepath.Dir(c.Path), 0o700); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrLogFile, err)
	}
	f, err := os.OpenFile(c.Path, os.O_CREATE|os.O_APPEND|os.O_RDWR, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrLogFile, err)
	}
	if err := f.Close(); err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrLogFile, err)
	}
	l := &lumberjack.Logger{Filename: c.Path, MaxAge: c.MaxAge, MaxBackups: c.MaxBackups, MaxSize: c.MaxSize}
	return l, l, nil
}

// ignoreErrors is kube-apiserver's "blocking" mode: an event that cannot
// be written is reported (by the backend, through kube's error handler)
// and the request goes on; WithAudit would otherwise answer 500.
type ignoreErrors struct{ audit.Sink }

func (i ignoreErrors) ProcessEvents(ev ...*auditinternal.Event) bool {
	i.Sink.ProcessEvents(ev...)
	return true
}

// Capped returns p with requests that carry a credential capped at the
// Metadata level (CarriesCredentials). This, and not the policy file, is
// why no secret data, token or key is ever written: kube's handlers log a
// request or response body only at the Request and RequestResponse
// levels, and every body a credential travels in belongs to one of those
// requests. Metadata (user, verb, object reference, response code,
// annotations) is still recorded. Capped(nil) is nil.
func Capped(p audit.PolicyRuleEvaluator) audit.PolicyRuleEvaluator {
	if p == nil {
		return nil
	}
	if c, ok := p.(capped); ok {
		return c
	}
	return capped{p}
}

type capped struct{ p audit.PolicyRuleEvaluator }

func (c capped) EvaluatePolicyRule(a authorizer.Attributes) audit.RequestAuditConfig {
	rac := c.p.EvaluatePolicyRule(a)
	if rac.Level.GreaterOrEqual(auditinternal.LevelRequest) && CarriesCredentials(a) {
		rac.Level = auditinternal.LevelMetadata
	}
	return rac
}

// CarriesCredentials says whether a request's or response's body may hold
// a credential: Secrets (their data: passwords, keys, ServiceAccount
// tokens, bootstrap tokens), TokenRequest (the issued token) and
// TokenReview (the token under review), in every version and verb. The
// URL never holds one: names and namespaces are not credentials, and the
// API takes no token in a query string.
func CarriesCredentials(a authorizer.Attributes) bool {
	return a.IsResourceRequest() && carriesCredentials(a.GetAPIGroup(), a.GetResource(), a.GetSubresource())
}

// carriesCredentials is CarriesCredentials' rule for a resource request of
// group, resource and subresource.
func carriesCredentials(group, resource, subresource string) bool {
	switch group {
	case "":
		return resource == "secrets" || resource == "serviceaccounts" && subresource == "token"
	case "authentication.k8s.io":
		return resource == "tokenreviews"
	}
	return false
}
