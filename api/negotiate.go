package api

import (
	"context"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	metav1beta1 "k8s.io/apimachinery/pkg/apis/meta/v1beta1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"

	"github.com/trustplane/trustplane/api/registry"
)

// restrictions says which output transformations resource endpoints accept,
// as kube-apiserver's RequestScope does: Table (in JSON or YAML only) and
// PartialObjectMetadata(List) in meta.k8s.io v1 and v1beta1. noTable is a
// resource without a table convertor (the virtual reviews), or a streaming
// list: kube answers a request for their Table 406, or serves the Accept
// header's next type.
//
// encodes, for a custom resource's endpoint, is its codecs: only the media
// types they encode (JSON and YAML, no protobuf) are negotiated, so an
// Accept header that lists protobuf before JSON gets JSON, as the
// specification says (kube answers 406, kubernetes/kubernetes#86253), and
// one that accepts nothing they encode gets kube's 406
// (errCustomNotAcceptable).
type restrictions struct {
	noTable bool
	encodes runtime.NegotiatedSerializer
}

func (r restrictions) AllowsMediaTypeTransform(mimeType, mimeSubType string, gvk *schema.GroupVersionKind) bool {
	if gvk == nil {
		return true
	}
	if gvk.GroupVersion() != metav1.SchemeGroupVersion && gvk.GroupVersion() != metav1beta1.SchemeGroupVersion {
		return false
	}
	switch gvk.Kind {
	case "Table":
		return !r.noTable && mimeType == "application" && (mimeSubType == "json" || mimeSubType == "yaml")
	case "PartialObjectMetadata", "PartialObjectMetadataList":
		return true
	}
	return false
}
func (restrictions) AllowsServerVersion(string) bool  { return false }
func (restrictions) AllowsStreamSchema(s string) bool { return s == "watch" }

// discoveryRestrictions accept no transformation, so that aggregated
// discovery requests fall back to the legacy documents.
type discoveryRestrictions struct{}

func (discoveryRestrictions) AllowsMediaTypeTransform(_, _ string, gvk *schema.GroupVersionKind) bool {
	return gvk == nil
}
func (discoveryRestrictions) AllowsServerVersion(string) bool { return false }
func (discoveryRestrictions) AllowsStreamSchema(string) bool  { return false }

// output is a negotiated response format: the media type (with any
// requested transformation, such as Table) and its serializer.
type output struct {
	mt   negotiation.MediaTypeOptions
	info runtime.SerializerInfo
}

// negotiateOutput picks the response format once per request; handlers call
// it before doing any work, so an unacceptable Accept header is a 406 that
// changes nothing.
func negotiateOutput(req *http.Request) (*output, error) {
	return negotiateOutputFor(req, restrictions{})
}

// negotiateOutputFor is negotiateOutput under r.
func negotiateOutputFor(req *http.Request, r restrictions) (*output, error) {
	var ns runtime.NegotiatedSerializer = registry.Codecs
	if r.encodes != nil {
		ns = encodedBy{registry.Codecs, r.encodes}
	}
	mt, info, err := negotiation.NegotiateOutputMediaType(req, ns, r)
	if err != nil {
		if r.encodes != nil {
			return nil, errCustomNotAcceptable()
		}
		return nil, err
	}
	return &output{mt: mt, info: info}, nil
}

// forStore is the restrictions of st's endpoints.
func forStore(st *registry.Store) restrictions {
	if st.Custom == nil {
		return restrictions{}
	}
	return restrictions{encodes: st.Codecs()}
}

// encodedBy offers the scheme's serializers (Tables and metadata are
// built-in kinds) for the media types the resource's codecs encode.
type encodedBy struct {
	runtime.NegotiatedSerializer
	resource runtime.NegotiatedSerializer
}

func (e encodedBy) SupportedMediaTypes() []runtime.SerializerInfo {
	var out []runtime.SerializerInfo
	for _, si := range e.NegotiatedSerializer.SupportedMediaTypes() {
		if _, ok := runtime.SerializerInfoForMediaType(e.resource.SupportedMediaTypes(), si.MediaType); ok {
			out = append(out, si)
		}
	}
	return out
}

// writeObject encodes obj in the negotiated format and version, turning it
// into a Table or PartialObjectMetadata first when the client asked for one.
func (s *Server) writeObject(w http.ResponseWriter, req *http.Request, out *output, code int, st *registry.Store, obj runtime.Object) {
	gv := st.GVR.GroupVersion()
	if _, isStatus := obj.(*metav1.Status); !isStatus && out.mt.Convert != nil {
		var err error
		obj, err = transform(req, st, obj, out.mt.Convert)
		if err != nil {
			s.writeError(w, req, err)
			return
		}
		gv = out.mt.Convert.GroupVersion()
	}
	s.auditResponse(req, obj, gv)
	encoder, err := encoderFor(st, out, obj, gv)
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	serializeObject(out.info.MediaType, encoder, w, req, code, obj)
}

// encoderFor is the encoder of obj in the negotiated format and version
// gv: the scheme's, or for a custom object its resource's codecs, which
// encode no protobuf (406, as kube answers for custom resources).
func encoderFor(st *registry.Store, out *output, obj runtime.Object, gv schema.GroupVersion) (runtime.Encoder, error) {
	if _, custom := obj.(runtime.Unstructured); !custom || st.Custom == nil {
		return registry.Codecs.EncoderForVersion(out.info.Serializer, gv), nil
	}
	codecs := st.Codecs()
	si, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), out.info.MediaType)
	if !ok {
		return nil, errCustomNotAcceptable()
	}
	ser := si.Serializer
	if out.info.Serializer == out.info.PrettySerializer && si.PrettySerializer != nil {
		ser = si.PrettySerializer
	}
	return codecs.EncoderForVersion(ser, gv), nil
}

// errCustomNotAcceptable is kube's 406 for a custom object asked for in a
// format it has no encoding in; its list names protobuf, which kube's
// custom resource serializer offers and then cannot encode.
func errCustomNotAcceptable() error {
	return negotiation.NewNotAcceptableError([]string{runtime.ContentTypeJSON, runtime.ContentTypeYAML, runtime.ContentTypeProtobuf})
}

// plainJSON and plainProtobuf are the serializers a request gets for JSON
// (unless it asks for pretty output) and for protobuf.
var plainJSON, plainProtobuf = func() (runtime.Serializer, runtime.Serializer) {
	j, _ := runtime.SerializerInfoForMediaType(registry.Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON)
	p, _ := runtime.SerializerInfoForMediaType(registry.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	return j.Serializer, p.Serializer
}()

// writeList writes a page of a list. JSON and protobuf, what clients ask
// for large lists, are written from each item's cached encoding
// (registry.ListBody), byte for byte what the codec would write, in pooled
// chunks straight to the connection or the compressor, without building
// the typed list; every other format (YAML, pretty JSON, Table,
// PartialObjectMetadataList) builds the list and goes through writeObject,
// as does a list whose audit event records the response (audit.go).
func (s *Server) writeList(w http.ResponseWriter, req *http.Request, format *output, st *registry.Store, page *registry.ListPage) {
	var body func() (*registry.ListBody, error)
	if format.mt.Convert == nil && page.Len() > 0 && !s.auditsResponseBody(req) {
		switch format.info.Serializer {
		case plainJSON:
			body = page.JSON
		case plainProtobuf:
			body = page.Protobuf
		}
	}
	if body == nil {
		list, err := page.Object()
		if err != nil {
			s.writeError(w, req, err)
			return
		}
		s.writeObject(w, req, format, http.StatusOK, st, list)
		return
	}
	b, err := body()
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	writeSized(format.info.MediaType, w, req, http.StatusOK, b.Size(), b)
}

func transform(req *http.Request, st *registry.Store, obj runtime.Object, target *schema.GroupVersionKind) (runtime.Object, error) {
	switch target.Kind {
	case "Table":
		return asTable(req.Context(), req, st, obj, target.GroupVersion())
	case "PartialObjectMetadata", "PartialObjectMetadataList":
		return asPartial(obj, target)
	}
	return nil, apierrors.NewBadRequest("no supported transformation for " + target.String())
}

// asTable renders obj with the resource's table convertor, embedding row
// objects as includeObject asks (PartialObjectMetadata by default).
func asTable(ctx context.Context, req *http.Request, st *registry.Store, obj runtime.Object, gv schema.GroupVersion) (runtime.Object, error) {
	opts := &metav1.TableOptions{}
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(req.URL.Query(), metav1.SchemeGroupVersion, opts); err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	if errs := metav1validation.ValidateTableOptions(opts); len(errs) > 0 {
		return nil, apierrors.NewBadRequest(errs.ToAggregate().Error())
	}
	table, err := st.TableConvertor.ConvertToTable(ctx, obj, opts)
	if err != nil {
		return nil, err
	}
	for i := range table.Rows {
		row := &table.Rows[i]
		switch opts.IncludeObject {
		case metav1.IncludeObject:
			versioned, err := st.Convertor().ConvertToVersion(row.Object.Object, st.GVR.GroupVersion())
			if err != nil {
				return nil, err
			}
			row.Object.Object = versioned
		case metav1.IncludeNone:
			row.Object.Object = nil
		default:
			m, err := meta.Accessor(row.Object.Object)
			if err != nil {
				return nil, err
			}
			partial := meta.AsPartialObjectMetadata(m)
			partial.GetObjectKind().SetGroupVersionKind(gv.WithKind("PartialObjectMetadata"))
			row.Object.Object = partial
		}
	}
	if lm, err := meta.ListAccessor(obj); err == nil {
		table.ResourceVersion = lm.GetResourceVersion()
		table.Continue = lm.GetContinue()
		table.RemainingItemCount = lm.GetRemainingItemCount()
	} else if m, err := meta.CommonAccessor(obj); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
	}
	table.GetObjectKind().SetGroupVersionKind(gv.WithKind("Table"))
	return table, nil
}

func asPartial(obj runtime.Object, target *schema.GroupVersionKind) (runtime.Object, error) {
	if meta.IsListType(obj) {
		if target.Kind != "PartialObjectMetadataList" {
			return nil, apierrors.NewBadRequest("you requested PartialObjectMetadata, but the requested object is a list")
		}
		items, err := meta.ExtractList(obj)
		if err != nil {
			return nil, err
		}
		list := &metav1.PartialObjectMetadataList{}
		for _, item := range items {
			m, err := meta.Accessor(item)
			if err != nil {
				return nil, err
			}
			p := meta.AsPartialObjectMetadata(m)
			p.GetObjectKind().SetGroupVersionKind(target.GroupVersion().WithKind("PartialObjectMetadata"))
			list.Items = append(list.Items, *p)
		}
		if lm, err := meta.ListAccessor(obj); err == nil {
			list.ResourceVersion = lm.GetResourceVersion()
			list.Continue = lm.GetContinue()
			list.RemainingItemCount = lm.GetRemainingItemCount()
		}
		list.GetObjectKind().SetGroupVersionKind(*target)
		return list, nil
	}
	if target.Kind != "PartialObjectMetadata" {
		return nil, apierrors.NewBadRequest("you requested PartialObjectMetadataList, but the requested object is not a list")
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	p := meta.AsPartialObjectMetadata(m)
	p.GetObjectKind().SetGroupVersionKind(*target)
	return p, nil
}

// writeError is the one place errors become Status responses.
func (s *Server) writeError(w http.ResponseWriter, req *http.Request, err error) {
	responsewriters.ErrorNegotiated(err, registry.Codecs, metav1.SchemeGroupVersion, w, req)
}
