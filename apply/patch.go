package apply

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/util/mergepatch"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// Sentinel errors; the api package maps them to Status codes.
var (
	// ErrBadPatch: the patch document itself cannot be decoded (400).
	ErrBadPatch = errors.New("bad patch")
	// ErrPatchFailed: a well-formed patch cannot be applied to the object,
	// for example a failing JSON patch "test" operation (422).
	ErrPatchFailed = errors.New("patch cannot be applied")
	// ErrTooManyOperations: a JSON patch exceeds MaxJSONPatchOperations (413).
	ErrTooManyOperations = errors.New("too many JSON patch operations")
	// ErrPatchPanicked: the patch library panicked on this patch (500, what
	// kube-apiserver answers when its panic filter catches the same panic).
	ErrPatchPanicked = errors.New("the patch library panicked")
)

// recoverPatch turns a panic of a patch library into ErrPatchPanicked, so
// that a patch which trips a library bug is one failed request. Found by
// the fuzz targets: the json-patch library panics on an "add" below a value
// an earlier operation of the same patch set to null, strategicpatch on a
// $retainKeys list holding an object.
func recoverPatch(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("%w: %v", ErrPatchPanicked, p)
	}
}

// MaxJSONPatchOperations is kube-apiserver's bound on JSON patch length.
const MaxJSONPatchOperations = 10000

// MaxJSONPatchCopyBytes bounds how much a JSON patch's copy operations may
// add to a document, kube-apiserver's --json-patch-max-copy-bytes default
// (3 MiB). Without it a patch of a few dozen copy operations, each copying
// a value into itself, doubles the document per operation and exhausts the
// node's memory.
const MaxJSONPatchCopyBytes = 3 << 20

// The copy limit is a global of the json-patch library; it is set as
// kube-apiserver sets it (server.Config.Complete), so that every caller of
// this package is bounded even before a server configures it.
func init() { SetJSONPatchMaxCopyBytes(MaxJSONPatchCopyBytes) }

// SetJSONPatchMaxCopyBytes bounds the total size that the "copy" operations
// of one JSON patch may add; a patch that would add more fails with
// json-patch's AccumulatedCopySizeError (422), as in kube-apiserver. The
// bound is process-wide (json-patch keeps it in a global), and, as kube's
// server config does, a later call only ever lowers it; n <= 0 changes
// nothing. Without a bound, a patch of a few KiB that copies a field onto
// itself repeatedly grows the object exponentially in memory.
func SetJSONPatchMaxCopyBytes(n int64) {
	for n > 0 {
		cur := atomic.LoadInt64(&jsonpatch.AccumulatedCopySizeLimit)
		if cur > 0 && cur <= n {
			return
		}
		if atomic.CompareAndSwapInt64(&jsonpatch.AccumulatedCopySizeLimit, cur, n) {
			return
		}
	}
}

// JSONPatch applies an RFC 6902 patch to original. Its copy operations are
// bounded by SetJSONPatchMaxCopyBytes and its length by
// MaxJSONPatchOperations.
func JSONPatch(original, patch []byte) (_ []byte, err error) {
	defer recoverPatch(&err)
	ops, err := jsonpatch.DecodePatch(patch)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadPatch, err)
	}
	if len(ops) > MaxJSONPatchOperations {
		return nil, fmt.Errorf("%w: The allowed maximum operations in a JSON patch is %d, got %d",
			ErrTooManyOperations, MaxJSONPatchOperations, len(ops))
	}
	out, err := ops.Apply(original)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrPatchFailed, err)
	}
	return out, nil
}

// MergePatch applies an RFC 7386 merge patch to original.
func MergePatch(original, patch []byte) (_ []byte, err error) {
	defer recoverPatch(&err)
	out, err := jsonpatch.MergePatch(original, patch)
	switch {
	case errors.Is(err, jsonpatch.ErrBadJSONPatch), errors.Is(err, jsonpatch.ErrBadJSONDoc):
		return nil, fmt.Errorf("%w: %v", ErrBadPatch, err)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrPatchFailed, err)
	}
	return out, nil
}

// StrategicMergePatch applies a strategic merge patch to original, using the
// patch metadata (merge keys, strategies) of the Go type of schema, which
// must be the external type of the object.
func StrategicMergePatch(original, patch []byte, schema interface{}) (_ []byte, err error) {
	defer recoverPatch(&err)
	var probe map[string]interface{}
	if err := json.Unmarshal(patch, &probe); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadPatch, err)
	}
	out, err := strategicpatch.StrategicMergePatch(original, patch, schema)
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, mergepatch.ErrBadJSONDoc), errors.Is(err, mergepatch.ErrBadPatchFormatForPrimitiveList),
		errors.Is(err, mergepatch.ErrBadPatchFormatForRetainKeys), errors.Is(err, mergepatch.ErrBadPatchFormatForSetElementOrderList),
		errors.Is(err, mergepatch.ErrUnsupportedStrategicMergePatchFormat):
		return nil, fmt.Errorf("%w: %v", ErrBadPatch, err)
	default:
		return nil, fmt.Errorf("%w: %v", ErrPatchFailed, err)
	}
}
