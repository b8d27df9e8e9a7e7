package registry

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1beta1 "k8s.io/apimachinery/pkg/apis/meta/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/kubernetes/pkg/api/legacyscheme"
	_ "k8s.io/kubernetes/pkg/apis/authentication/install" // TokenReview, TokenRequest, SelfSubjectReview
	_ "k8s.io/kubernetes/pkg/apis/authorization/install"  // SubjectAccessReview and friends
	_ "k8s.io/kubernetes/pkg/apis/autoscaling/install"    // Scale, of custom resources' scale subresource
	_ "k8s.io/kubernetes/pkg/apis/certificates/install"   // CertificateSigningRequest, ClusterTrustBundle
	_ "k8s.io/kubernetes/pkg/apis/coordination/install"   // Lease
	_ "k8s.io/kubernetes/pkg/apis/core/install"           // internal core types, v1 conversions and defaults
	_ "k8s.io/kubernetes/pkg/apis/events/install"         // events.k8s.io: Event converted to and from core's
	_ "k8s.io/kubernetes/pkg/apis/rbac/install"           // Role, ClusterRole and their bindings
)

// Scheme holds every served kind in its internal and external versions, with
// kube's conversions and defaulting. It is kube's legacy scheme, because kube's
// strategies type-check against it.
var Scheme = legacyscheme.Scheme

// Codecs are the serializers (JSON, YAML, protobuf) for Scheme.
var Codecs serializer.CodecFactory = legacyscheme.Codecs

func init() {
	unversioned := schema.GroupVersion{Version: "v1"}
	metav1.AddToGroupVersion(Scheme, unversioned)
	Scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{}, &metav1.APIVersions{}, &metav1.APIGroupList{}, &metav1.APIGroup{}, &metav1.APIResourceList{})
	utilruntime.Must(metav1.AddMetaToScheme(Scheme))
	utilruntime.Must(metav1beta1.AddMetaToScheme(Scheme))
}

// StorageCodec encodes internal objects as protobuf of gv and decodes stored
// protobuf back to internal objects, with defaulting.
func StorageCodec(gv schema.GroupVersion) runtime.Codec {
	info, _ := runtime.SerializerInfoForMediaType(Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	return Codecs.CodecForVersions(info.Serializer, info.Serializer, gv, runtime.InternalGroupVersioner)
}
