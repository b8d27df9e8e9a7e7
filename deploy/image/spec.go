package image

import (
	"sort"
	"strings"
)

// The image's fixed facts. The Helm chart and deploy/Dockerfile rely on
// them; change them together.
const (
	// BinaryPath is the entrypoint: the only executable in the image.
	BinaryPath = "/trustplane"
	// DataDir is the volume holding the Raft log, snapshots and keys.
	DataDir = "/var/lib/trustplane"
	// NonRootUID and NonRootGID are the distroless "nonroot" user's ids,
	// so security policies written for distroless images fit this one.
	NonRootUID = 65532
	NonRootGID = 65532
)

// Spec is the runtime part of the image config that both builds (this
// package and the Dockerfile) must produce.
type Spec struct {
	User         string
	Entrypoint   []string
	Cmd          []string
	Env          []string
	ExposedPorts []string
	Volumes      []string
	WorkingDir   string
}

// DefaultSpec is trustplane's image config. Env sets what a container
// needs that a laptop does not: the data directory on the volume and the
// API on every interface (Raft and gossip stay on loopback, so a lone
// `docker run` is a working one-node cluster; the chart sets them).
func DefaultSpec() Spec {
	return Spec{
		User:       "65532:65532",
		Entrypoint: []string{BinaryPath},
		Cmd:        []string{"serve"},
		Env: []string{
			"TRUSTPLANE_DATA_DIR=" + DataDir,
			"TRUSTPLANE_LISTEN=0.0.0.0:6443",
		},
		// The API, Raft (TCP) and gossip (TCP and UDP).
		ExposedPorts: []string{"6443/tcp", "6444/tcp", "6445/tcp", "6445/udp"},
		Volumes:      []string{DataDir},
		WorkingDir:   "/",
	}
}

// normalized returns s with its set-valued fields sorted, so two specs
// compare equal whatever order their sources list ports and volumes in.
func (s Spec) normalized() Spec {
	out := s
	out.ExposedPorts = sortedCopy(s.ExposedPorts)
	out.Volumes = sortedCopy(s.Volumes)
	return out
}

func sortedCopy(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	return out
}

// String renders a spec for test failures and the builder's output.
func (s Spec) String() string {
	return strings.Join([]string{
		"user " + s.User,
		"entrypoint " + strings.Join(s.Entrypoint, " "),
		"cmd " + strings.Join(s.Cmd, " "),
		"env " + strings.Join(s.Env, " "),
		"ports " + strings.Join(s.ExposedPorts, " "),
		"volumes " + strings.Join(s.Volumes, " "),
		"workdir " + s.WorkingDir,
	}, "; ")
}
