package api

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

// chunkEncoder writes its chunks in turn, as a streaming encoder does, then
// fails with err if set.
type chunkEncoder struct {
	chunks [][]byte
	err    error
}

func (e chunkEncoder) Encode(_ runtime.Object, w io.Writer) error {
	for _, c := range e.chunks {
		if _, err := w.Write(c); err != nil {
			return err
		}
	}
	return e.err
}

func (e chunkEncoder) Identifier() runtime.Identifier { return "test-chunks" }

// answer is what a client sees of a response.
type answer struct {
	code                    int
	contentType, encoding   string
	vary                    string
	body                    []byte
	compressedSize, rawSize int
}

func respond(t *testing.T, write func(http.ResponseWriter, *http.Request), acceptEncoding string) answer {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/api/v1/configmaps", nil)
	if acceptEncoding != "" {
		req.Header.Set("Accept-Encoding", acceptEncoding)
	}
	rec := httptest.NewRecorder()
	write(rec, req)
	a := answer{
		code: rec.Code, contentType: rec.Header().Get("Content-Type"),
		encoding: rec.Header().Get("Content-Encoding"), vary: rec.Header().Get("Vary"),
		body: rec.Body.Bytes(), compressedSize: rec.Body.Len(),
	}
	if a.encoding == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(a.body))
		if err != nil {
			t.Fatalf("not a gzip stream: %v", err)
		}
		if a.body, err = io.ReadAll(zr); err != nil {
			t.Fatalf("gzip stream does not decode: %v", err)
		}
	}
	a.rawSize = len(a.body)
	return a
}

// TestSerializeObjectMatchesKube checks the compressed writer against
// kube's own SerializeObject: for every case the client must see the same
// status, headers and (decompressed) body.
func TestSerializeObjectMatchesKube(t *testing.T) {
	big := []byte(`{"items":[` + strings.Repeat(`{"metadata":{"name":"x"},"data":{"k":"vvvvvvvvvvvvvvvv"}},`, 5000) + `{}]}`)
	var streamed [][]byte
	streamed = append(streamed, []byte("{"))
	for i := 0; i < 3000; i++ {
		streamed = append(streamed, []byte(`"k":"vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv",`))
	}
	streamed = append(streamed, []byte(`"z":1}`))
	for _, tc := range []struct {
		name     string
		enc      chunkEncoder
		accept   string
		gateOff  bool
		wantGzip bool
	}{
		{"small, gzip accepted", chunkEncoder{chunks: [][]byte{[]byte(`{"kind":"Status"}`)}}, "gzip", false, false},
		{"large in one write, gzip accepted", chunkEncoder{chunks: [][]byte{big}}, "gzip", false, true},
		{"large in one write, among other encodings", chunkEncoder{chunks: [][]byte{big}}, "deflate, gzip", false, true},
		{"large, only a weighted gzip (kube matches the bare token)", chunkEncoder{chunks: [][]byte{big}}, "gzip;q=1.0", false, false},
		{"large, no Accept-Encoding", chunkEncoder{chunks: [][]byte{big}}, "", false, false},
		{"large, APIResponseCompression off", chunkEncoder{chunks: [][]byte{big}}, "gzip", true, false},
		{"streamed in small writes past the threshold", chunkEncoder{chunks: streamed}, "gzip", false, true},
		{"streamed, short of the threshold", chunkEncoder{chunks: streamed[:100]}, "gzip", false, false},
		{"empty", chunkEncoder{}, "gzip", false, false},
		{"encoding fails before writing", chunkEncoder{err: errors.New("boom")}, "gzip", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.gateOff {
				featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.APIResponseCompression, false)
			}
			ours := respond(t, func(w http.ResponseWriter, r *http.Request) {
				serializeObject("application/json", tc.enc, w, r, http.StatusOK, nil)
			}, tc.accept)
			kube := respond(t, func(w http.ResponseWriter, r *http.Request) {
				responsewriters.SerializeObject("application/json", tc.enc, w, r, http.StatusOK, nil)
			}, tc.accept)
			if ours.code != kube.code || ours.contentType != kube.contentType || ours.encoding != kube.encoding || ours.vary != kube.vary {
				t.Fatalf("ours: %d %q %q %q; kube's: %d %q %q %q", ours.code, ours.contentType, ours.encoding, ours.vary, kube.code, kube.contentType, kube.encoding, kube.vary)
			}
			if !bytes.Equal(ours.body, kube.body) {
				t.Fatalf("bodies differ: ours %d bytes, kube's %d", len(ours.body), len(kube.body))
			}
			if (ours.encoding == "gzip") != tc.wantGzip {
				t.Fatalf("gzip %q, want compressed=%v", ours.encoding, tc.wantGzip)
			}
			if tc.wantGzip && ours.compressedSize >= ours.rawSize/2 {
				t.Errorf("compressed %d of %d bytes: hardly compressed", ours.compressedSize, ours.rawSize)
			}
		})
	}
}

// BenchmarkSerializeLargeList compares the cost of writing a large JSON
// response gzipped, ours against kube's SerializeObject.
func BenchmarkSerializeLargeList(b *testing.B) {
	var buf bytes.Buffer
	buf.WriteString(`{"kind":"ConfigMapList","apiVersion":"v1","items":[`)
	for i := 0; i < 10000; i++ {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(`{"metadata":{"name":"l-` + strings.Repeat("0", 6) + `","namespace":"bench-list","uid":"8f1d2c3b-1111-2222-3333-444455556666","resourceVersion":"123456","creationTimestamp":"2026-11-24T05:00:00Z"},"data":{"payload":"` + strings.Repeat("x", 256) + `"}}`)
	}
	buf.WriteString(`]}`)
	enc := chunkEncoder{chunks: [][]byte{buf.Bytes()}}
	for _, impl := range []struct {
		name  string
		write func(string, runtime.Encoder, http.ResponseWriter, *http.Request, int, runtime.Object)
	}{{"trustplane", serializeObject}, {"kube", responsewriters.SerializeObject}} {
		b.Run(impl.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/api/v1/configmaps", nil)
			req.Header.Set("Accept-Encoding", "gzip")
			b.SetBytes(int64(buf.Len()))
			for b.Loop() {
				rec := &discardWriter{h: http.Header{}}
				impl.write("application/json", enc, rec, req, http.StatusOK, nil)
			}
		})
	}
}

// discardWriter is a ResponseWriter that keeps nothing.
type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}

// chunks is a body of known size written in pieces (ListJSON.WriteTo).
type chunks [][]byte

func (c chunks) WriteTo(w io.Writer) (int64, error) {
	var n int64
	for _, p := range c {
		m, err := w.Write(p)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (c chunks) size() int { return len(bytes.Join(c, nil)) }

// TestWriteSizedMatchesKube: a body of known size written in chunks
// (the list path) reaches the client as kube's SerializeObject sends the
// same bytes encoded in one piece: status, headers, decompressed body; the
// size alone decides compression, at kube's threshold.
func TestWriteSizedMatchesKube(t *testing.T) {
	piece := []byte(`{"metadata":{"name":"x"},"data":{"k":"vvvvvvvvvvvvvvvv"}},`)
	many := func(n int) chunks {
		c := chunks{[]byte(`{"items":[`)}
		for range n {
			c = append(c, piece)
		}
		return append(c, []byte(`{}]}`+"\n"))
	}
	atThreshold := chunks{bytes.Repeat([]byte("x"), gzipThreshold)}
	for _, tc := range []struct {
		name     string
		body     chunks
		accept   string
		gateOff  bool
		wantGzip bool
	}{
		{"small, gzip accepted", many(3), "gzip", false, false},
		{"large, gzip accepted", many(5000), "gzip", false, true},
		{"at the threshold exactly", atThreshold, "gzip", false, false},
		{"one byte past the threshold", append(atThreshold, []byte("y")), "gzip", false, true},
		{"large, no Accept-Encoding", many(5000), "", false, false},
		{"large, APIResponseCompression off", many(5000), "gzip", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.gateOff {
				featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.APIResponseCompression, false)
			}
			ours := respond(t, func(w http.ResponseWriter, r *http.Request) {
				writeSized("application/json", w, r, http.StatusOK, tc.body.size(), tc.body)
			}, tc.accept)
			whole := chunkEncoder{chunks: [][]byte{bytes.Join(tc.body, nil)}}
			kube := respond(t, func(w http.ResponseWriter, r *http.Request) {
				responsewriters.SerializeObject("application/json", whole, w, r, http.StatusOK, nil)
			}, tc.accept)
			if ours.code != kube.code || ours.contentType != kube.contentType || ours.encoding != kube.encoding || ours.vary != kube.vary {
				t.Fatalf("ours: %d %q %q %q; kube's: %d %q %q %q", ours.code, ours.contentType, ours.encoding, ours.vary, kube.code, kube.contentType, kube.encoding, kube.vary)
			}
			if !bytes.Equal(ours.body, kube.body) {
				t.Fatalf("bodies differ: ours %d bytes, kube's %d", len(ours.body), len(kube.body))
			}
			if (ours.encoding == "gzip") != tc.wantGzip {
				t.Fatalf("gzip %q, want compressed=%v", ours.encoding, tc.wantGzip)
			}
		})
	}
}
