package certs

import "errors"

// Sentinel errors. Callers match them with errors.Is; the wrapping error
// adds the file name, never file contents.
var (
	// ErrCANotFound is returned by LoadCA when neither the CA certificate nor
	// its key exists. LoadOrCreateCA creates a CA in that case instead.
	ErrCANotFound = errors.New("certs: CA not found")

	// ErrCAIncomplete means only one of the CA certificate and key exists.
	// The operator must restore the missing file or remove both: issuing a
	// new CA would invalidate every certificate signed by the old one.
	ErrCAIncomplete = errors.New("certs: CA is half present (certificate without key or key without certificate)")

	// ErrInvalidCA means the CA files exist but are unusable: unparsable, not
	// a CA certificate, or a key that does not belong to the certificate.
	ErrInvalidCA = errors.New("certs: invalid CA")

	// ErrInvalidRequest means a Request cannot be issued as given.
	ErrInvalidRequest = errors.New("certs: invalid certificate request")

	// ErrNotANode means a peer's certificate is not a node certificate:
	// not issued by the node CA, or without the node subject. It is the
	// refusal on every node-only surface (Raft, the internal RPC, X-Remote-*
	// headers, the leader answering a forwarded write).
	ErrNotANode = errors.New("certs: not a trustplane node certificate")

	// ErrInvalidKubeconfig means a Kubeconfig lacks a required field.
	ErrInvalidKubeconfig = errors.New("certs: invalid kubeconfig")
)
