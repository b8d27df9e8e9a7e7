package storage

import (
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubestorage "k8s.io/apiserver/pkg/storage"
)

// ParseResourceVersion parses the resourceVersion of a get or list; "" and
// "0" are 0. Anything else must be a positive decimal uint64, or it is 400
// with kube-apiserver's wording (storage.ValidateListOptions around
// APIObjectVersioner.ParseResourceVersion's InvalidError).
func ParseResourceVersion(rv string) (uint64, error) {
	if rv == "" || rv == "0" {
		return 0, nil
	}
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		invalid := kubestorage.NewInvalidError(field.ErrorList{field.Invalid(field.NewPath("resourceVersion"), rv, err.Error())})
		return 0, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version: %v", invalid))
	}
	if n == 0 {
		return 0, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version: %s", rv))
	}
	return n, nil
}

// parseWatchResourceVersion parses the resourceVersion of a watch, which
// must be "" or "0" (0) or the canonical decimal form of a positive
// uint64; anything else is 400 "invalid resource version: <rv>".
func parseWatchResourceVersion(rv string) (uint64, error) {
	if rv == "" || rv == "0" {
		return 0, nil
	}
	n, err := strconv.ParseUint(rv, 10, 64)
	if err != nil || n == 0 || strconv.FormatUint(n, 10) != rv {
		return 0, apierrors.NewBadRequest(fmt.Sprintf("invalid resource version: %s", rv))
	}
	return n, nil
}

// FormatResourceVersion is the wire form of a revision.
func FormatResourceVersion(rev uint64) string { return strconv.FormatUint(rev, 10) }
