package api

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversionscheme "k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"
	"k8s.io/apiserver/pkg/warning"

	"github.com/trustplane/trustplane/api/registry"
)

// objectRequest does what every request with an object body starts with:
// negotiate the response format (406 before any work), pick the input
// serializer from Content-Type (415) and read the bounded body (413).
func (s *Server) objectRequest(req *http.Request, r restrictions) (*output, runtime.SerializerInfo, []byte, error) {
	format, err := negotiateOutputFor(req, r)
	if err != nil {
		return nil, runtime.SerializerInfo{}, nil, err
	}
	si, err := negotiation.NegotiateInputSerializer(req, false, registry.Codecs)
	if err != nil {
		return nil, runtime.SerializerInfo{}, nil, err
	}
	body, err := s.readBody(req)
	if err != nil {
		return nil, runtime.SerializerInfo{}, nil, err
	}
	return format, si, body, nil
}

// createRequest is objectRequest plus the validated CreateOptions, what
// every POST (stored or virtual resource) starts with.
func (s *Server) createRequest(req *http.Request, r restrictions) (*output, runtime.SerializerInfo, []byte, *metav1.CreateOptions, error) {
	format, si, body, err := s.objectRequest(req, r)
	if err != nil {
		return nil, si, nil, nil, err
	}
	opts := &metav1.CreateOptions{}
	if err := decodeOptions(req, opts, "CreateOptions", func() field.ErrorList { return metav1validation.ValidateCreateOptions(opts) }); err != nil {
		return nil, si, nil, nil, err
	}
	return format, si, body, opts, nil
}

// updateRequest is objectRequest plus the validated UpdateOptions, what
// every PUT starts with.
func (s *Server) updateRequest(req *http.Request, r restrictions) (*output, runtime.SerializerInfo, []byte, *metav1.UpdateOptions, error) {
	format, si, body, err := s.objectRequest(req, r)
	if err != nil {
		return nil, si, nil, nil, err
	}
	opts := &metav1.UpdateOptions{}
	if err := decodeOptions(req, opts, "UpdateOptions", func() field.ErrorList { return metav1validation.ValidateUpdateOptions(opts) }); err != nil {
		return nil, si, nil, nil, err
	}
	return format, si, body, opts, nil
}

// decodeOptions decodes the query into a meta options struct and validates
// it, with kube-apiserver's status codes (400 undecodable, 422 invalid).
func decodeOptions(req *http.Request, opts runtime.Object, kind string, validate func() field.ErrorList) error {
	if err := metainternalversionscheme.ParameterCodec.DecodeParameters(optionsQuery(req), metav1.SchemeGroupVersion, opts); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if validate == nil {
		return nil
	}
	if errs := validate(); len(errs) > 0 {
		return apierrors.NewInvalid(schema.GroupKind{Group: metav1.GroupName, Kind: kind}, "", errs)
	}
	return nil
}

// optionsQuery is the request's query for its options, without dryRun's
// empty values: the specification reads `?dryRun` with no value as a
// request with side effects allowed, where kube-apiserver answers 422
// (docs/COMPATIBILITY.md).
func optionsQuery(req *http.Request) url.Values {
	q := req.URL.Query()
	if vs, ok := q["dryRun"]; ok {
		kept := vs[:0]
		for _, v := range vs {
			if v != "" {
				kept = append(kept, v)
			}
		}
		if len(kept) == 0 {
			delete(q, "dryRun")
		} else {
			q["dryRun"] = kept
		}
	}
	return q
}

// readBody reads at most MaxRequestBodyBytes; more is 413, as kube-apiserver.
func (s *Server) readBody(req *http.Request) ([]byte, error) {
	defer req.Body.Close()
	limit := s.cfg.MaxRequestBodyBytes
	lr := &io.LimitedReader{R: req.Body, N: limit + 1}
	data, err := readAll(lr, req.ContentLength)
	if err != nil {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("unable to read the request body: %v", err))
	}
	if lr.N <= 0 {
		return nil, apierrors.NewRequestEntityTooLargeError(fmt.Sprintf("limit is %d", limit))
	}
	return data, nil
}

// maxBodyPresize bounds the buffer a declared Content-Length reserves
// before the body arrives: a client that declares megabytes and sends
// nothing must not make the server hold them.
const maxBodyPresize = 64 << 10

// readAll is io.ReadAll with a first buffer of the declared length (plus
// one byte, to see the end without growing): io.ReadAll starts at 512
// bytes and doubles, which cost a TokenReview's small body three
// allocations and copies, a tenth of the bytes its request allocated.
// Past maxBodyPresize, or without a length, it grows as io.ReadAll does.
func readAll(r io.Reader, declared int64) ([]byte, error) {
	size := int64(512)
	if declared >= 0 {
		size = min(declared, maxBodyPresize) + 1
	}
	b := make([]byte, 0, size)
	for {
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

// decodeBody decodes a create or update body into the internal version,
// applying the fieldValidation directive to unknown and duplicate fields.
func (s *Server) decodeBody(ctx context.Context, st *registry.Store, si runtime.SerializerInfo, body []byte, directive string) (runtime.Object, error) {
	defaultGVK := st.GVK()
	if st.Custom != nil {
		// Negotiated against the scheme's types; custom objects have
		// fewer (no protobuf).
		custom, ok := runtime.SerializerInfoForMediaType(st.Codecs().SupportedMediaTypes(), si.MediaType)
		if !ok {
			return nil, negotiation.NewUnsupportedMediaTypeError(mediaTypes(st.Codecs()))
		}
		si = custom
	}
	obj, gvk, err := decodeValidated(ctx, st.Codecs(), st.Hub(), si, body, directive, defaultGVK, st.NewFunc())
	if err != nil {
		quoted := body
		if st.GroupResource() == (schema.GroupResource{Resource: "secrets"}) {
			quoted = nil // see transformDecodeError
		}
		return nil, transformDecodeError(st.KindName, err, gvk, quoted)
	}
	if gvk.GroupVersion() != st.GVR.GroupVersion() {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("the API version in the data (%s) does not match the expected API version (%v)",
			gvk.GroupVersion().String(), st.GVR.GroupVersion().String()))
	}
	return obj, nil
}

// decodeValidated decodes body into hub with codecs under the fieldValidation directive, as kube's create and update
// handlers do for every kind: Strict refuses unknown and duplicate fields,
// Warn (the default) reports them as warnings, Ignore drops them. The
// error is the decoder's, for the caller to word.
func decodeValidated(ctx context.Context, codecs runtime.NegotiatedSerializer, hub schema.GroupVersion, si runtime.SerializerInfo, body []byte, directive string, defaultGVK schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if directive == "" {
		directive = metav1.FieldValidationWarn
	}
	ser := si.Serializer
	if (directive == metav1.FieldValidationWarn || directive == metav1.FieldValidationStrict) && si.StrictSerializer != nil {
		ser = si.StrictSerializer
	}
	obj, gvk, err := codecs.DecoderToVersion(ser, hub).Decode(body, &defaultGVK, into)
	if err != nil {
		strictErr, isStrict := runtime.AsStrictDecodingError(err)
		if !isStrict || obj == nil || directive != metav1.FieldValidationWarn {
			return nil, gvk, err
		}
		for _, e := range strictErr.Errors() {
			warning.AddWarning(ctx, "", e.Error())
		}
	}
	return obj, gvk, nil
}

// mediaTypes lists what codecs decode, for a 415.
func mediaTypes(codecs runtime.NegotiatedSerializer) []string {
	var out []string
	for _, si := range codecs.SupportedMediaTypes() {
		out = append(out, si.MediaType)
	}
	return out
}

// transformDecodeError words a decode failure as kube-apiserver does. kube
// quotes the body's first 30 bytes when it finds no kind in it; a nil body
// quotes nothing. Callers pass nil for bodies that may hold a secret or a
// token (Secrets, TokenRequest, TokenReview): the message is the
// response's, and the audit log records it even at Metadata, where no
// body is ever written.
func transformDecodeError(kind string, baseErr error, gvk *schema.GroupVersionKind, body []byte) error {
	if gvk != nil && len(gvk.Kind) > 0 {
		return apierrors.NewBadRequest(fmt.Sprintf("%s in version %q cannot be handled as a %s: %v", gvk.Kind, gvk.Version, kind, baseErr))
	}
	if body == nil {
		return apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type %s): %v", kind, baseErr))
	}
	return apierrors.NewBadRequest(fmt.Sprintf("the object provided is unrecognized (must be of type %s): %v (%s)", kind, baseErr, summarizeData(body, 30)))
}

func summarizeData(data []byte, maxLength int) string {
	switch {
	case len(data) == 0:
		return "<empty>"
	case data[0] == '{':
		if len(data) > maxLength {
			return string(data[:maxLength]) + " ..."
		}
		return string(data)
	default:
		if len(data) > maxLength {
			return hex.EncodeToString(data[:maxLength]) + " ..."
		}
		return hex.EncodeToString(data)
	}
}

// checkName enforces that a PUT body names the object on the URL.
func checkName(obj runtime.Object, name, ns string) error {
	m, err := meta.Accessor(obj)
	if err != nil {
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s based on URL) was undeterminable: %v", name, err))
	}
	if m.GetName() != name {
		return apierrors.NewBadRequest(fmt.Sprintf("the name of the object (%s) does not match the name on the URL (%s)", m.GetName(), name))
	}
	if ns != "" && m.GetNamespace() != "" && m.GetNamespace() != ns {
		return apierrors.NewBadRequest(fmt.Sprintf("the namespace of the object (%s) does not match the namespace on the request (%s)", m.GetNamespace(), ns))
	}
	return nil
}
