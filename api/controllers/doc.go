// Package controllers runs the kube-controller-manager controllers trustplane
// serves with (default ServiceAccounts, the kube-root-ca.crt ConfigMaps, the
// tokens of kubernetes.io/service-account-token Secrets, cluster-role
// aggregation, the CSR signers, approver and cleaner, the garbage collector,
// the namespace controller and the ValidatingAdmissionPolicy status
// controller), using kube's own controller code from k8s.io/kubernetes.
//
// It owns three things: the Host, which holds the controllers' lease
// (kube-controller-manager's, kube-system/kube-controller-manager) while
// the node stands for it; the Manager, which starts the controllers when
// the node comes to hold it and stops them when it no longer does; and
// Kube, which builds kube's controllers with their identities.
//
// Rules it keeps:
//   - One host, a follower when there is one. Controllers run on the one
//     node that holds their lease, one term at a time; a term ends
//     (context cancelled, every informer and controller goroutine waited
//     for) before the next may start, so nothing leaks from one term into
//     the next. Which nodes stand for the lease is cluster.Node's rule
//     (StandsForControllers): a follower voter in touch with its leader,
//     the leader only when no other voter can, a read replica never. So
//     the leader, which orders every write, does not also decode every
//     object written for the controllers' informers, as etcd's leader does
//     not run kube-controller-manager.
//   - The lease is client-go's leader election through the node's own API,
//     as kube-controller-manager's: a holder that cannot renew within
//     RenewDeadline stops, the others take it LeaseDuration after they
//     last saw it renewed, and a node that stops standing releases it.
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
//     so no event is written by a node that no longer holds the lease. A controller
//     added here with a recorder must do the same: a broadcaster per term,
//     sinking into that term's client, shut down before Run returns.
//   - Leader-only work uses the Manager too (Config.Name), with raft's
//     leadership as its Leadership: the expiry of events (api/storage
//     Expiry) runs in terms of its own on the leader, whether or not the
//     controllers run.
//   - Caches hold what the controllers read. The informer factories'
//     transform (trim.go) drops managedFields, and the data and annotations
//     no controller here reads, so the controllers do not keep a second full
//     copy of every stored object beside the API's own; a controller added
//     here that reads more must be added to trimCached's list.
package controllers
