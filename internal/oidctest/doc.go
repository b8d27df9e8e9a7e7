// Package oidctest is a real OpenID Connect issuer for tests: an HTTPS
// server on a loopback port with its own CA, serving the discovery
// document and the key set, and signing tokens with an RSA key. It is what
// trustplane's federated issuers are tested against, in unit and
// end-to-end tests alike.
//
// Rules it keeps:
//   - It is a real issuer: real TLS, real RS256 signatures, documents as
//     an identity provider serves them; tests break it only through the
//     knobs (Slow, Huge, Garbage), never by faking the client side.
//   - It listens on loopback only and stops with the test (Close).
package oidctest
