package registry

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"
)

// restStrategy is a kube strategy for creates, updates and deletes.
type restStrategy interface {
	rest.RESTCreateStrategy
	rest.RESTUpdateStrategy
	rest.RESTDeleteStrategy
}

// withRule is kube's strategy plus one rule of trustplane's, checked on
// create (old nil) and update once kube's own validation passes, so that
// kube's errors come first and read as kube's.
type withRule struct {
	restStrategy
	rule func(obj, old runtime.Object) field.ErrorList
}

func (s withRule) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	if errs := s.restStrategy.Validate(ctx, obj); len(errs) > 0 {
		return errs
	}
	return s.rule(obj, nil)
}

func (s withRule) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	if errs := s.restStrategy.ValidateUpdate(ctx, obj, old); len(errs) > 0 {
		return errs
	}
	return s.rule(obj, old)
}
