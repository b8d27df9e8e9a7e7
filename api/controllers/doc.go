// Package controllers runs the kube-controller-manager controllers trustplane
// serves with (default ServiceAccounts, the kube-root-ca.crt ConfigMaps, the
// tokens of kubernetes.io/service-account-token Secrets, cluster-role
// aggregation, the CSR signers, approver and cleaner, the garbage collector,
// the namespace controller and the ValidatingAdmissionPolicy status
// controller), using kube's own controller code from k8s.io/kubernetes.
//
// It owns two things: the Manager, which starts the controllers when the
// node becomes the Raft leader and stops them when it stops leading, and
// Kube, which builds kube's controllers with their identities.
//
// Rules it keeps:
//   - Leader-only. Controllers run on exactly the node that leads, one term at
//     a time; a term ends (context cancelled, every informer and controller
//     goroutine waited for) before the next may start, so nothing leaks from
//     one term into the next.
//   - API clients only. Controllers reach the cluster through the node's own
//     HTTPS API with client-go informers, never through the registry or the
//     fsm, so every write they make is authenticated, authorised, admitted
//     and replicated like any client's.
//   - kube's identities. Each controller presents a client certificate from
//     the cluster CA in the name kube-controller-manager gives it (for
//     example system:serviceaccount:kube-system:service-account-controller),
//     so kube's bootstrap RBAC policy grants it exactly what it needs. The
//     shared informers and the tokens controller use the root identity
//     system:kube-controller-manager, as kube-controller-manager does.
//   - Events as the controller. Of the controllers here only kube's garbage
//     collector records events (OwnerRefInvalidNamespace); it builds its
//     own broadcaster, which writes through its own client as
//     generic-garbage-collector (kube's bootstrap policy grants events
//     create and patch) and which its Run shuts down when the term ends,
//     so no event is written by a node that no longer leads. A controller
//     added here with a recorder must do the same: a broadcaster per term,
//     sinking into that term's client, shut down before Run returns.
//   - Other leader-only work uses the Manager too (Config.Name): the
//     expiry of events (api/storage Expiry) runs in terms of its own,
//     whether or not the controllers run.
//   - Caches hold what the controllers read. The informer factories'
//     transform (trim.go) drops managedFields, and the data and annotations
//     no controller here reads, so the controllers do not keep a second full
//     copy of every stored object beside the API's own; a controller added
//     here that reads more must be added to trimCached's list.
package controllers
