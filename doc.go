// Package trustplane holds the release of this source tree: the one home of
// the version every trustplane binary, image and backup reports.
//
// Rules it keeps:
//   - VERSION, beside this file, is the release the tree builds: a semantic
//     version without the leading "v" ("0.1.0"), with a "-dev" pre-release
//     between releases. It changes only with a CHANGELOG.md section of the
//     same version; TestChangelogHasTheRelease enforces both.
//   - The commit is not in the tree: make build, image and release stamp it
//     (-ldflags -X github.com/trustplane/trustplane.commit=...), and a plain
//     go build reports none.
//   - Formats lists the version of every format a node writes for other
//     nodes and builds to read (Raft entries, snapshots, backups, the
//     internal RPC); each is defined where it is written.
//   - The Kubernetes API level served (/version's gitVersion, v1.33.x) is
//     not the release: it is the API package's (api.Version), which kubectl
//     reads for its version skew rules.
package trustplane
