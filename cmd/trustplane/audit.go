package main

import (
	"flag"
	"log/slog"

	"github.com/trustplane/trustplane/api"
	"github.com/trustplane/trustplane/api/auditlog"
)

// auditFlags are kube-apiserver's audit log flags, with kube's meanings
// and defaults (k8s.io/apiserver/pkg/server/options/audit.go).
type auditFlags struct{ cfg auditlog.Config }

func (a *auditFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&a.cfg.Path, "audit-log-path", "", "write every request's audit events (audit.k8s.io/v1 Event JSON lines) to this file; '-' means standard out. Nothing is recorded without --audit-policy-file")
	fs.StringVar(&a.cfg.PolicyFile, "audit-policy-file", "", "audit.k8s.io/v1 Policy deciding each request's level and omitted stages; Secrets, TokenRequest and TokenReview are recorded at Metadata at most, whatever it says")
	fs.IntVar(&a.cfg.MaxAge, "audit-log-maxage", 0, "days to keep rotated audit log files, by the timestamp in their names (0: no limit)")
	fs.IntVar(&a.cfg.MaxBackups, "audit-log-maxbackup", 0, "rotated audit log files to keep (0: no limit)")
	fs.IntVar(&a.cfg.MaxSize, "audit-log-maxsize", 0, "megabytes the audit log file may reach before it is rotated (0: 100)")
}

func (a *auditFlags) validate() error { return a.cfg.Validate() }

// open opens the audit log and hands it to the API. The caller closes it
// once the API has stopped.
func (a *auditFlags) open(log *slog.Logger, acfg *api.Config) (*auditlog.Log, error) {
	l, err := auditlog.Open(a.cfg)
	if err != nil {
		return nil, err
	}
	if a.cfg.Path != "" && a.cfg.PolicyFile == "" {
		log.Warn("--audit-log-path is set without --audit-policy-file: no audit events are recorded, as in kube-apiserver")
	}
	if l.Sink != nil {
		acfg.AuditSink, acfg.AuditPolicy = l.Sink, l.Policy
		log.Info("audit log", "path", a.cfg.Path, "policy", a.cfg.PolicyFile)
	}
	return l, nil
}
