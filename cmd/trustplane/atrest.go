package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"

	"github.com/trustplane/trustplane/api/encryptionkeys"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/cluster"
	"github.com/trustplane/trustplane/fsm"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/apis/apiserver"
	apiserverinstall "k8s.io/apiserver/pkg/apis/apiserver/install"
	"k8s.io/apiserver/pkg/server/options/encryptionconfig"
	"k8s.io/apiserver/pkg/storage/value"
)

// atRestFlags are the data-at-rest flags of serve.
type atRestFlags struct {
	// encryptionConfig is kube's EncryptionConfiguration file.
	encryptionConfig string
	// rewriteRate bounds the values an encryption key's rotation rewrites
	// per second (api/encryptionkeys).
	rewriteRate float64
}

func (f *atRestFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.encryptionConfig, "encryption-provider-config", "",
		"kube-apiserver's EncryptionConfiguration (apiserver.config.k8s.io/v1) for Secrets and the token signing keys: providers aescbc, aesgcm, secretbox, identity (no KMS); every node must be given the same file. Its keys wrap the data keys `trustplane rotate encryption-key` rotates online")
	fs.Float64Var(&f.rewriteRate, "encryption-rewrite-rate", 200,
		"stored values per second the leader rewrites under a promoted encryption key (trustplane rotate encryption-key)")
}

// fileTransformers are the transformers the encryption configuration asks
// for; nil without one.
func (f *atRestFlags) fileTransformers() (value.ResourceTransformers, error) {
	if f.rewriteRate <= 0 {
		return nil, fmt.Errorf("--encryption-rewrite-rate %v: must be positive", f.rewriteRate)
	}
	if f.encryptionConfig == "" {
		return nil, nil
	}
	if err := refuseKMS(f.encryptionConfig); err != nil {
		return nil, err
	}
	// No KMS, so nothing is started that ctx would have to stop.
	loaded, err := encryptionconfig.LoadEncryptionConfig(context.Background(), f.encryptionConfig, false, "")
	if err != nil {
		return nil, fmt.Errorf("--encryption-provider-config: %w", err)
	}
	return encryptionconfig.StaticTransformers(loaded.Transformers), nil
}

// encryptionKeys builds the replicated data keys (api/encryptionkeys),
// wrapped by the file's keys, and subscribes them to the applied stream
// before the storage layer's watch cache, so a batch that brings a key in
// is applied to the keys before the watch cache opens its values.
func encryptionKeys(log *slog.Logger, file value.ResourceTransformers, back backend, node *cluster.Node, f *fsm.FSM) *encryptionkeys.Store {
	ek := encryptionkeys.New(encryptionkeys.Config{
		Backend: back, File: file,
		Members: membership{node: node}.appliedIndexes,
		Unable:  membership{node: node}.lacking(encryptionkeys.Feature),
		Logger:  log.With("component", "encryption-keys"),
	})
	f.Subscribe(ek)
	return ek
}

// runEncryptionKeys runs the leader's rewrite of values sealed with a key
// other than the active one.
func runEncryptionKeys(ctx context.Context, ek *encryptionkeys.Store, f *fsm.FSM, stor *storage.Storage, node *cluster.Node, perSecond float64) {
	ek.Run(ctx, encryptionkeys.RewriteConfig{
		Export: f.Export, AtRestOf: stor.AtRestOf, IsLeader: node.IsLeader,
		PerSecond: perSecond, Burst: max(1, int(perSecond/10)),
	})
}

// privateDir creates dir 0700, or makes an existing one 0700 when others
// may read it (etcd warns about the same): it holds the Raft log,
// snapshots and private keys.
func privateDir(log *slog.Logger, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	log.Warn("making the data directory private", "dir", dir, "was", fi.Mode().Perm().String(), "now", fs.FileMode(0o700).String())
	return os.Chmod(dir, 0o700)
}

// errKMS: the encryption configuration names a KMS provider, which
// trustplane does not support (docs/COMPATIBILITY.md).
var errKMS = errors.New("KMS providers are not supported; use aescbc, aesgcm, secretbox or identity")

// refuseKMS reads the configuration as kube does and refuses it if any
// resource uses a KMS provider, before kube's loader would dial its socket.
func refuseKMS(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--encryption-provider-config: %w", err)
	}
	scheme := runtime.NewScheme()
	apiserverinstall.Install(scheme)
	obj, _, err := serializer.NewCodecFactory(scheme).UniversalDecoder().Decode(data, nil, nil)
	if err != nil {
		return fmt.Errorf("--encryption-provider-config %s: %w", path, err)
	}
	cfg, ok := obj.(*apiserver.EncryptionConfiguration)
	if !ok {
		return fmt.Errorf("--encryption-provider-config %s: got %T, want an EncryptionConfiguration", path, obj)
	}
	for _, r := range cfg.Resources {
		for _, p := range r.Providers {
			if p.KMS != nil {
				return fmt.Errorf("--encryption-provider-config %s: %v: %w", path, r.Resources, errKMS)
			}
		}
	}
	return nil
}
