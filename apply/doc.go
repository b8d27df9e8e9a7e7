// Package apply owns the pure merge logic of writes: JSON patch (RFC 6902),
// JSON merge patch (RFC 7386), strategic merge patch, and the building
// blocks of server-side apply and field validation:
//
//   - the structured-merge-diff/v4 TypeConverter of the served kinds, built
//     from kube's generated OpenAPI definitions as kube-apiserver builds it
//     (NewTypeConverter);
//   - kube's FieldManager per resource and subresource, with the strategy's
//     reset fields (NewFieldManager): it records managedFields on every
//     write, merges applies, reports conflicts, and carries client-side
//     apply's last-applied annotation; objects with managedFields reach
//     structured-merge-diff as maps rather than reflected structs
//     (unstructuredFirst), with kube's results;
//   - decoding an apply body and its strict (duplicate field) check, as
//     kube decodes it, in one JSON pass for the compact JSON clients send
//     (DecodeApplyPatch; FuzzApplyPatchJSON holds it to kube's decoding),
//     and the field manager a write is recorded under when the client
//     names none (ManagerOrUserAgent).
//
// Rules it keeps: every function is pure (bytes or objects in, bytes or
// objects out, no I/O; only the FieldManager reads the clock, for
// managedFields time stamps, which is why it runs on the leader before a
// write is proposed), works on the external (versioned) JSON form of an
// object or on kube's internal objects through the scheme, and returns
// sentinel errors wrapped with %w so that the api package can map them to
// kube-apiserver's status codes in one place. Client bytes are bounded as
// kube-apiserver bounds them: at most MaxJSONPatchOperations operations in a
// JSON patch, and at most MaxJSONPatchCopyBytes added by its copy
// operations (a limit the json-patch library keeps globally: this package
// sets it at init, and SetJSONPatchMaxCopyBytes may only lower it). Every decoder of client bytes here has a fuzz target
// (fuzz_test.go). The HTTP wiring (which FieldManager runs where in the
// store's optimistic loop) lives in api/fieldmanager.go.
package apply
