package main

import (
	"fmt"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/version"
	utilcompatibility "k8s.io/apiserver/pkg/util/compatibility"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	basecompatibility "k8s.io/component-base/compatibility"

	"github.com/trustplane/trustplane/api"
)

// --emulated-version is kube-apiserver's flag, read by kube's own component
// registry (component-base/compatibility): "1.32" or "kube=1.32", from the
// binary's release minus three (never below 1.31) to the binary's. The
// emulated release decides three things here, as in kube-apiserver:
//
//   - the feature gates' defaults are that release's;
//   - the API lifetimes (runtimeconfig.go) are judged at that release, and a
//     kind introduced after it is off by default;
//   - the CEL environment's compatibility version is the release before it:
//     a policy expression written now may use only the libraries that
//     release already had, so that a rollback to it still compiles them,
//     while expressions already stored keep every library this binary has.
//
// kube's registry is process-wide and read lazily by kube's code (the CEL
// environments), so it is set once, before anything is built.

// checkEmulatedVersion checks --emulated-version on a registry of its own,
// so that a bad flag is refused before anything starts and parsing twice
// (tests) changes nothing.
func checkEmulatedVersion(s string) (*version.Version, error) {
	r := basecompatibility.NewComponentGlobalsRegistry()
	ev := utilcompatibility.DefaultBuildEffectiveVersion()
	if err := r.Register(basecompatibility.DefaultKubeComponent, ev, utilfeature.DefaultMutableFeatureGate.DeepCopy()); err != nil {
		return nil, err
	}
	if err := setEmulatedVersion(r, s); err != nil {
		return nil, err
	}
	return ev.EmulationVersion(), nil
}

// applyEmulatedVersion sets --emulated-version on kube's process-wide
// registry, and the emulated and compatibility releases /version reports.
// It comes before the feature gates are set (applyFeatureGates), since the
// emulated release decides their defaults.
func applyEmulatedVersion(s string) error {
	r := utilcompatibility.DefaultComponentGlobalsRegistry
	if err := setEmulatedVersion(r, s); err != nil {
		return err
	}
	ev := r.EffectiveVersionFor(basecompatibility.DefaultKubeComponent)
	api.Version.EmulationMajor = version.Itoa(ev.EmulationVersion().Major())
	api.Version.EmulationMinor = version.Itoa(ev.EmulationVersion().Minor())
	api.Version.MinCompatibilityMajor = version.Itoa(ev.MinCompatibilityVersion().Major())
	api.Version.MinCompatibilityMinor = version.Itoa(ev.MinCompatibilityVersion().Minor())
	return nil
}

// emulatedVersion is the release the node emulates, once applied.
func emulatedVersion() *version.Version {
	return utilcompatibility.DefaultComponentGlobalsRegistry.EffectiveVersionFor(basecompatibility.DefaultKubeComponent).EmulationVersion()
}

// setEmulatedVersion runs s through the registry's own flag and Set, so the
// syntax, the messages and the range are kube's. Only the emulated-version
// flag is used: --feature-gates stays this server's (features.go).
func setEmulatedVersion(r basecompatibility.ComponentGlobalsRegistry, s string) error {
	fs := pflag.NewFlagSet("emulation", pflag.ContinueOnError)
	r.AddFlags(fs)
	if s != "" {
		if err := fs.Set("emulated-version", s); err != nil {
			return fmt.Errorf("--emulated-version: %w", err)
		}
	}
	if err := r.Set(); err != nil {
		return fmt.Errorf("--emulated-version: %w", err)
	}
	if errs := r.Validate(); len(errs) > 0 {
		return fmt.Errorf("--emulated-version: %w", utilerrors.NewAggregate(errs))
	}
	return nil
}
