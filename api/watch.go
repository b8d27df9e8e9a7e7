package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"

	"github.com/trustplane/trustplane/api/registry"
	"github.com/trustplane/trustplane/api/storage"
	"github.com/trustplane/trustplane/watchcache"
)

// defaultWatchTimeout is kube-apiserver's --min-request-timeout; a watch
// without timeoutSeconds ends after a random time between it and twice it,
// so that clients spread their reconnections.
const defaultWatchTimeout = 30 * time.Minute

// initialEventsEndAnnotation marks the bookmark that ends the initial events
// of a sendInitialEvents watch.
const initialEventsEndAnnotation = "k8s.io/initial-events-end"

// watch serves ?watch=true on a collection from the watch cache.
func (s *Server) watch(w http.ResponseWriter, req *http.Request, st *registry.Store, format *output, opts *metainternalversion.ListOptions) {
	codecs := st.Codecs()
	if format.mt.Convert != nil {
		codecs = registry.Codecs // Tables and metadata are built-in kinds
	}
	stream, err := negotiation.NegotiateOutputMediaTypeStream(req, codecs, restrictions{})
	if err != nil && st.Custom != nil && format.mt.Convert == nil {
		err = errCustomNotAcceptable() // kube's list, which names protobuf
	}
	if err != nil {
		s.writeError(w, req, err)
		return
	}
	timeout := defaultWatchTimeout + time.Duration(rand.Int64N(int64(defaultWatchTimeout)))
	if opts.TimeoutSeconds != nil && *opts.TimeoutSeconds > 0 {
		timeout = time.Duration(*opts.TimeoutSeconds) * time.Second
	}
	ctx, cancel := context.WithTimeout(req.Context(), timeout)
	defer cancel()

	ww := &watchWriter{
		st: st, req: req, format: format, events: &s.events,
		framer: stream.StreamSerializer.Framer,
		outer:  registry.Codecs.EncoderForVersion(stream.StreamSerializer.Serializer, st.GVR.GroupVersion()),
		inner:  codecs.EncoderForVersion(stream.Serializer, st.GVR.GroupVersion()),
	}
	if format.mt.Convert != nil {
		ww.inner = registry.Codecs.EncoderForVersion(stream.Serializer, format.mt.Convert.GroupVersion())
	}
	if st.Custom != nil {
		// The scheme has no WatchEvent in a custom group: the event is
		// written as it is, which is what the versioned encoder writes.
		ww.outer = stream.StreamSerializer.Serializer
	}
	mediaType := stream.MediaType
	if mediaType != runtime.ContentTypeJSON {
		mediaType += ";stream=watch"
	}

	flusher, ok := w.(http.Flusher)
	if !ok {
		s.writeError(w, req, apierrors.NewInternalError(errors.New("streaming is not supported by the connection")))
		return
	}
	// A start before the window is 410 Gone, which kube-apiserver sends as
	// an ERROR event on an accepted stream; every other error is answered
	// before the stream starts.
	watcher, err := st.Watch(ctx, opts)
	if err != nil && !apierrors.IsResourceExpired(err) {
		s.writeError(w, req, err)
		return
	}
	w.Header().Set("Content-Type", mediaType)
	w.Header().Set("Transfer-Encoding", "chunked")
	w.WriteHeader(http.StatusOK)
	flusher.Flush()
	ww.frames = ww.framer.NewFrameWriter(w)
	if err != nil {
		ww.writeStatus(err)
		flusher.Flush()
		return
	}
	defer watcher.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stopping:
			// The server is shutting down: end the stream so clients resume
			// elsewhere, rather than holding Shutdown until its deadline.
			return
		case ev, ok := <-watcher.Events():
			if !ok {
				if err := watcher.Err(); err != nil && !errors.Is(err, watchcache.ErrSlowWatcher) &&
					!errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
					ww.writeStatus(apierrors.NewInternalError(err))
					flusher.Flush()
				}
				return
			}
			if err := ww.write(ev); err != nil {
				s.log.Debug("watch ended", "error", err)
				return
			}
			if len(watcher.Events()) == 0 {
				flusher.Flush()
			}
		}
	}
}

// watchWriter encodes watch events as kube-apiserver does: each event is a
// metav1.WatchEvent whose object is encoded separately (the embedded
// encoding), framed for the stream (newline-delimited JSON, length-prefixed
// protobuf).
type watchWriter struct {
	st       *registry.Store
	req      *http.Request
	format   *output
	framer   runtime.Framer
	frames   interface{ Write([]byte) (int, error) }
	outer    runtime.Encoder
	inner    runtime.Encoder
	buf      bytes.Buffer
	noHeader bool // Table events after the first carry no column definitions
	// events shares encoded events between watchers (watchshare.go);
	// encoders identifies inner and outer there, "" until first used.
	events   *sharedEvents
	encoders string
}

func (ww *watchWriter) write(ev watchcache.Event) error {
	var key sharedEventKey
	shared := ww.format.mt.Convert == nil && ev.Type != watchcache.Bookmark
	if shared {
		if ww.encoders == "" {
			ww.encoders = string(ww.inner.Identifier()) + "\x00" + string(ww.outer.Identifier())
		}
		kv := ev.KV
		if ev.Type == watchcache.Deleted && kv == nil {
			kv = ev.Prev
		}
		key = sharedEventKey{kv: kv, typ: ev.Type, revision: ev.Revision, encoders: ww.encoders}
		shared = kv != nil
	}
	if shared {
		if b, ok := ww.events.get(key); ok {
			_, err := ww.frames.Write(b)
			return err
		}
	}
	obj, err := ww.object(ev)
	if err != nil {
		return ww.writeStatus(apierrors.NewInternalError(err))
	}
	if ww.format.mt.Convert != nil {
		obj, err = ww.transform(obj)
		if err != nil {
			return ww.writeStatus(err)
		}
	}
	if !shared {
		return ww.send(string(ev.Type), obj)
	}
	b, err := ww.encode(string(ev.Type), obj)
	if err != nil {
		return err
	}
	b = append([]byte(nil), b...)
	ww.events.put(key, b)
	_, err = ww.frames.Write(b)
	return err
}

// object is the event's object with the event's resourceVersion. Decoded
// objects are shared between watchers, so anything changed is a copy.
func (ww *watchWriter) object(ev watchcache.Event) (runtime.Object, error) {
	if ev.Type == watchcache.Bookmark {
		obj := ww.st.NewFunc()
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, err
		}
		m.SetResourceVersion(fmt.Sprint(ev.Revision))
		if ev.InitialEventsEnd {
			annotations := map[string]string{initialEventsEndAnnotation: "true"}
			blueprint, err := ww.listBlueprint()
			if err != nil {
				return nil, err
			}
			if blueprint != "" {
				annotations[metav1.InitialEventsListBlueprintAnnotationKey] = blueprint
			}
			m.SetAnnotations(annotations)
		}
		return obj, nil
	}
	var (
		raw any
		err error
	)
	if ev.Type == watchcache.Deleted && ev.KV == nil {
		raw, err = ev.PrevObject()
	} else {
		raw, err = ev.Object()
	}
	if err != nil {
		return nil, err
	}
	obj, ok := raw.(runtime.Object)
	if !ok {
		return nil, fmt.Errorf("watch: unexpected object %T", raw)
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil, err
	}
	if rv := fmt.Sprint(ev.Revision); m.GetResourceVersion() != rv {
		obj = obj.DeepCopyObject()
		if m, err = meta.Accessor(obj); err != nil {
			return nil, err
		}
		m.SetResourceVersion(rv)
		return obj, nil
	}
	return storage.Unshared(obj), nil // encoders set its kind
}

// listBlueprint is the empty list of the stream's kind, encoded as the
// stream's objects are and then in base64, which client-go (1.33) requires
// on the bookmark that ends a streaming list's initial events: it decodes
// the list it rebuilds from it, so that the list comes out of the same
// decoders as a LIST's (kube's watchListTransformer). A Table stream has
// none.
func (ww *watchWriter) listBlueprint() (string, error) {
	list := ww.st.NewListFunc()
	if target := ww.format.mt.Convert; target != nil {
		if target.Kind != "PartialObjectMetadata" {
			return "", nil
		}
		list = &metav1.PartialObjectMetadataList{}
	}
	var buf bytes.Buffer
	if err := ww.inner.Encode(list, &buf); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(buf.Bytes()), nil
}

// transform renders an event's object as the client asked (a one-row Table
// for kubectl get -w, or PartialObjectMetadata).
func (ww *watchWriter) transform(obj runtime.Object) (runtime.Object, error) {
	target := ww.format.mt.Convert
	if target.Kind == "Table" {
		q := ww.req.URL.Query()
		if ww.noHeader {
			q.Set("noHeaders", "true")
		}
		r := ww.req.Clone(ww.req.Context())
		r.URL.RawQuery = q.Encode()
		ww.noHeader = true
		return asTable(r.Context(), r, ww.st, obj, target.GroupVersion())
	}
	return asPartial(obj, target)
}

func (ww *watchWriter) writeStatus(err error) error {
	st := apierrors.APIStatus(nil)
	if !errors.As(err, &st) {
		st = apierrors.NewInternalError(err)
	}
	status := st.Status()
	status.Kind, status.APIVersion = "Status", "v1"
	return ww.send("ERROR", &status)
}

func (ww *watchWriter) send(typ string, obj runtime.Object) error {
	b, err := ww.encode(typ, obj)
	if err != nil {
		return err
	}
	_, err = ww.frames.Write(b)
	return err
}

// encode returns the event's unframed bytes, valid until the next encode.
func (ww *watchWriter) encode(typ string, obj runtime.Object) ([]byte, error) {
	ww.buf.Reset()
	if err := ww.inner.Encode(obj, &ww.buf); err != nil {
		return nil, err
	}
	embedded := append([]byte(nil), ww.buf.Bytes()...)
	ww.buf.Reset()
	event := &metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: embedded}}
	if err := ww.outer.Encode(event, &ww.buf); err != nil {
		return nil, err
	}
	return ww.buf.Bytes(), nil
}
