// Package authnconfig owns kube's structured authentication configuration
// (--authentication-config: AuthenticationConfiguration of
// apiserver.config.k8s.io, as kube-apiserver 1.33 reads it) and the legacy
// --oidc-* flags it replaces: reading and validating the file, building
// the JWT authenticators of federated issuers, and reloading the file when
// it changes.
//
// Rules it keeps:
//   - kube does the work: the file is decoded with kube's scheme, checked
//     by kube's validation (CEL compiled by kube's compiler), and every
//     issuer is kube's own JWT authenticator
//     (k8s.io/apiserver/plugin/pkg/authenticator/token/oidc), unioned and
//     made audience-agnostic as kube-apiserver does it. Only the HTTP
//     client each issuer fetches its discovery document and keys with is
//     ours, for the next rule.
//   - An issuer cannot hold the node: every fetch from it ends within
//     Options.FetchTimeout and reads at most Options.MaxFetchBytes
//     (decompressed), and issuers are initialised in the background
//     (kube's), so a slow, huge or malformed discovery document or key set
//     blocks neither start-up nor requests; a token of an issuer not
//     initialised yet is refused.
//   - An issuer cannot send the node elsewhere, or make it fetch without
//     end: fetches are https only (with the issuer's certificate
//     authority), redirects stay within the origin asked, and each issuer
//     gets at most a few requests a second, however many tokens with
//     unknown key ids arrive. What an issuer (or an address it names)
//     answers never reaches an error: TokenReview returns errors to its
//     callers, so a status other than 200 or a body that is neither JSON
//     nor a JWT is an error that quotes none of it, and the authenticator's
//     errors are cut before the answers go-oidc quotes (JWT.AuthenticateToken).
//   - The file is the only source when given: the --oidc-* flags and it
//     are mutually exclusive, with kube's message. The service account
//     issuers may not be configured as JWT issuers (kube's rule).
//   - Reloads are kube's: a changed file is decoded, validated and its
//     issuers initialised before it replaces the running set; one that
//     fails any step changes nothing and counts as a failure in kube's
//     apiserver_authentication_config_controller metrics. The anonymous
//     section may not change on reload (kube's rule): which paths are
//     public is fixed for the life of the process.
//   - A key an issuer stopped publishing does not stay: Refetch builds the
//     running issuers again (repeatedly for a while, each build replacing
//     the running set only once it has initialised), which the node asks
//     for whenever its own signing keys change, since a federated issuer
//     may publish them (the fleet set-up). A refetch never holds up a
//     reload (it waits for its issuers without the lock), and never undoes
//     one: a refetch that ends after a reload is dropped.
//   - The anonymous section is read here but applied by api.Server, which
//     owns the order of authentication; it never reaches TokenReview,
//     which answers for tokens only.
package authnconfig
