// Package apply owns the pure merge logic of writes: JSON patch (RFC 6902),
// JSON merge patch (RFC 7386) and strategic merge patch, and later
// server-side apply and field validation.
//
// Rules it keeps: every function is pure (bytes in, bytes out, no I/O, no
// clock), works on the external (versioned) JSON form of an object, and
// returns sentinel errors wrapped with %w so that the api package can map
// them to kube-apiserver's status codes in one place.
package apply
