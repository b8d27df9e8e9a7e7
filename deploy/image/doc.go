// Package image builds trustplane's container image without a Docker
// engine, with go-containerregistry: one layer holding the static binary,
// /etc/passwd and /etc/group naming the non-root user, an empty /tmp and
// the data directory owned by that user, on an empty (scratch) base.
//
// Rules it keeps:
//   - The image is a pure function of the binary, the version and the
//     architecture: entries have fixed times and owners, so one binary
//     always gives one digest.
//   - It never runs as root: the config's User is NonRootUID:NonRootGID
//     and the data directory belongs to that user.
//   - Spec is the single statement of the image's config; deploy/Dockerfile
//     must say the same, and a test holds the two together.
package image
