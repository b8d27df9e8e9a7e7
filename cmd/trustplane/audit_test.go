package main

import (
	"errors"
	"testing"

	"github.com/trustplane/trustplane/api/auditlog"
)

func TestAuditFlags(t *testing.T) {
	t.Run("off by default, with kube's rotation defaults", func(t *testing.T) {
		o, err := parseServe(nil)
		if err != nil {
			t.Fatal(err)
		}
		if o.audit.cfg != (auditlog.Config{}) {
			t.Fatalf("defaults %+v", o.audit.cfg)
		}
	})
	t.Run("every flag is read, and has an environment twin", func(t *testing.T) {
		t.Setenv("TRUSTPLANE_AUDIT_POLICY_FILE", "/etc/policy.yaml")
		t.Setenv("TRUSTPLANE_AUDIT_LOG_MAXBACKUP", "3")
		o, err := parseServe([]string{"--audit-log-path", "/var/log/audit.log", "--audit-log-maxsize", "10", "--audit-log-maxage", "7"})
		if err != nil {
			t.Fatal(err)
		}
		want := auditlog.Config{Path: "/var/log/audit.log", PolicyFile: "/etc/policy.yaml", MaxSize: 10, MaxBackups: 3, MaxAge: 7}
		if o.audit.cfg != want {
			t.Fatalf("parsed %+v, want %+v", o.audit.cfg, want)
		}
	})
	for _, bad := range []string{"--audit-log-maxsize", "--audit-log-maxbackup", "--audit-log-maxage"} {
		t.Run("refuses a negative "+bad, func(t *testing.T) {
			if _, err := parseServe([]string{bad, "-1"}); !errors.Is(err, auditlog.ErrConfig) {
				t.Fatalf("error %v, want %v", err, auditlog.ErrConfig)
			}
		})
	}
}
