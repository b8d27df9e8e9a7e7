// Package admission runs kube-apiserver's admission plugins (k8s.io/apiserver
// admission.Interface) as a step of a store's admission chain
// (registry.AdmitFunc).
//
// It owns the translation from a store write to admission.Attributes: the
// user, namespace, name, operation and options the plugins expect. The rules
// it keeps:
//
//   - Mutating admission runs before validating admission, both before the
//     resource's strategy prepares and validates the object (the store calls
//     the hook there). kube runs validating admission after the strategy;
//     running it earlier only changes which of two errors a request that
//     fails both sees.
//   - Validating plugins may instead run after the strategy
//     (HookValidate), as kube's do, seeing the prepared object and the
//     request's dry run; ValidatingAdmissionPolicy runs there.
//   - A delete is admitted by validating plugins only (HookDelete), with
//     the object as stored, once the strategy has agreed to delete.
//   - Validating plugins see the objects as Unstructured objects of the
//     request's kind, converted once per request on first use, so that
//     kube's policy plugin does not convert them again for every policy
//     it evaluates (unstructured.go).
//   - A write through a subresource whose objects differ from the
//     resource's (a custom resource's scale) is admitted as the View its
//     context carries: kube's plugins see autoscaling/v1 Scales there, not
//     the custom object, and what mutating plugins change in the view is
//     written back into the object (view.go), as kube's ScaleREST does.
//   - Mutating plugins run as kube's chain runs them (Hook): in order,
//     all once more when one asks to be reinvoked, and managed fields they
//     leave undecodable are put back with a warning, as kube's handlers
//     wrap admission.
//   - Mutating plugins see a create before its system fields exist: the
//     store fills uid and creationTimestamp after them (registry.Store),
//     so no webhook can choose them.
//   - A plugin that does not handle the operation (admission.Handler) is
//     skipped, as kube's admission chain skips it.
//   - NodeSubjectRestriction is the one plugin of our own: no CSR, for any
//     signer, may ask for a trustplane node subject (certs.IsNodeSubject).
//     It is installed on CertificateSigningRequests whatever else is.
//   - Plugins run on the leader inside the store's optimistic update loop, so
//     they must not have side effects that a retry would repeat.
package admission
