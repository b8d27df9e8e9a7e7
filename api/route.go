package api

import (
	"iter"
	"net/http"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// kube-apiserver serves resources through go-restful routes (one per path
// and method, endpoints/installer.go), and go-restful's router refuses a
// request by its media types before any handler runs, with messages of its
// own that kube passes on as a Status (server/handler.go
// serviceErrorHandler). checkRoute answers as that router does, so that a
// client sees the same 406 and 415 whichever server it talks to.

// routeMediaTypes is what every resource route produces: the codec
// factory's media types in its order (MediaTypesForSerializer; CBOR is off
// in 1.33), and routeWatchMediaTypes what a collection's GET route (list
// and watch) produces besides, the streaming ones.
var (
	routeMediaTypes      = []string{"application/json", "application/yaml", "application/vnd.kubernetes.protobuf"}
	routeWatchMediaTypes = append(append([]string(nil), routeMediaTypes...),
		"application/json;stream=watch", "application/vnd.kubernetes.protobuf;stream=watch")
)

// checkRoute is go-restful's check of a request's Content-Type and Accept
// against the route for verb (RouterJSR311.detectRoute), after the path
// and method matched:
//
//   - A PATCH route consumes only the patch types: another Content-Type
//     (none counts as application/octet-stream) with a body is 415
//     "415: Unsupported Media Type". Without a body no route is left, so
//     the Accept check below lists no representations.
//   - Every other route consumes anything.
//   - An Accept naming none of the route's media types (parameters
//     ignored; */* matches, type/* does not) is 406 listing them, or 415
//     for a POST, PUT or PATCH without a Content-Length header.
func checkRoute(req *http.Request, verb string) error {
	produces := routeMediaTypes
	if verb == "list" || verb == "watch" {
		produces = routeWatchMediaTypes
	}
	if req.Method == http.MethodPatch && !consumesPatch(req.Header.Get("Content-Type")) {
		if req.ContentLength > 0 {
			return routeError(http.StatusUnsupportedMediaType, "415: Unsupported Media Type")
		}
		produces = nil
	}
	accept := req.Header.Get("Accept")
	if accept == "" {
		accept = "*/*"
	}
	if produces != nil && acceptsAny(accept, produces) {
		return nil
	}
	available := strings.Join(produces, ", ")
	switch req.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
		if req.Header.Get("Content-Length") == "" {
			return routeError(http.StatusUnsupportedMediaType, "415: Unsupported Media Type\n\nAvailable representations: "+available)
		}
	}
	return routeError(http.StatusNotAcceptable, "406: Not Acceptable\n\nAvailable representations: "+available)
}

// refuseRoute writes checkRoute's refusal, if any, and says whether it did.
func (s *Server) refuseRoute(w http.ResponseWriter, req *http.Request, verb string) bool {
	err := checkRoute(req, verb)
	if err != nil {
		s.writeError(w, req, err)
	}
	return err != nil
}

// routeError is the Status kube-apiserver makes of a go-restful refusal.
func routeError(code int, message string) error {
	return apierrors.NewGenericServerResponse(code, "", schema.GroupResource{}, "", message, 0, false)
}

// consumesPatch says whether a comma-separated Content-Type names a patch
// type, as go-restful's Route.matchesContentType does for a PATCH route.
func consumesPatch(contentType string) bool {
	if contentType == "" {
		contentType = "application/octet-stream"
	}
	for mt := range bareMediaTypes(contentType) {
		if slices.Contains(patchTypes, mt) {
			return true
		}
	}
	return false
}

// acceptsAny says whether a comma-separated Accept names */* or one of
// produces, as go-restful's Route.matchesAccept does: the request's types
// lose their parameters (a Table request is application/json), the
// produced ones are compared whole.
func acceptsAny(accept string, produces []string) bool {
	for mt := range bareMediaTypes(accept) {
		if mt == "*/*" || slices.Contains(produces, mt) {
			return true
		}
	}
	return false
}

// bareMediaTypes yields the media types of a comma-separated header value
// without their parameters, as go-restful reads Content-Type and Accept;
// it allocates nothing, since every resource request passes through here.
func bareMediaTypes(list string) iter.Seq[string] {
	return func(yield func(string) bool) {
		for mt := range strings.SplitSeq(list, ",") {
			mt, _, _ = strings.Cut(mt, ";")
			if !yield(strings.TrimSpace(mt)) {
				return
			}
		}
	}
}
