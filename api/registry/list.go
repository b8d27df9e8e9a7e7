package registry

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"math/bits"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/trustplane/trustplane/api/storage"
)

// ListPage is one page of a list as the storage layer read it: the shared
// decoded items, their stored versions and the list's metadata. It becomes
// the typed list (Object) only for a response that needs one; JSON and
// protobuf are written from each item's cached encoding (JSON, Protobuf)
// and never build it, which spares a list of 10,000 items copying every
// decoded item into the typed list by reflection.
type ListPage struct {
	st  *Store
	res storage.ListResult
}

// ListPage reads the page of the list the options select, ordered by
// namespace and name.
func (s *Store) ListPage(ctx context.Context, opts *metainternalversion.ListOptions) (*ListPage, error) {
	res, err := s.storage.GetList(ctx, s.prefix(ctx), opts, s.predicate(opts))
	if err != nil {
		return nil, err
	}
	return &ListPage{st: s, res: res}, nil
}

// Len is the number of items of the page.
func (p *ListPage) Len() int { return len(p.res.KVs) }

// listMeta is the page's metadata as the list carries it.
func (p *ListPage) listMeta() metav1.ListMeta {
	m := metav1.ListMeta{ResourceVersion: storage.FormatResourceVersion(p.res.Revision)}
	if p.res.Continue != "" {
		m.Continue = p.res.Continue
		m.RemainingItemCount = p.res.RemainingItemCount
	}
	return m
}

// Object is the page as the resource's internal list type, its items
// copied by value from the shared decoded objects.
func (p *ListPage) Object() (runtime.Object, error) {
	list := p.st.NewListFunc()
	if err := meta.SetList(list, p.res.Items); err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	m := p.listMeta()
	lm.SetResourceVersion(m.ResourceVersion)
	if m.Continue != "" {
		lm.SetContinue(m.Continue)
		if m.RemainingItemCount != nil {
			lm.SetRemainingItemCount(m.RemainingItemCount)
		}
	}
	return list, nil
}

// ListBody is a page ready to be written as a response body in JSON or
// protobuf, byte for byte what kube's serializer writes for the external
// list, spliced from each item's encoding cached per stored version
// (storage.Store.ItemJSON, ItemProtobuf) instead of converting and encoding
// every object again. Every item's encoding is in hand before anything is
// written, so an item that cannot be encoded is an error before the
// response starts.
type ListBody struct {
	head  []byte
	items [][]byte // shared, never modified
	tail  []byte
	pb    bool // items are framed as protobuf's field 2; else JSON, comma-separated
	size  int
}

// JSON is what the JSON serializer writes for the page as the external list
// (encoding/json, then a newline).
func (p *ListPage) JSON() (*ListBody, error) {
	s := p.st
	metaJSON, err := json.Marshal(p.listMeta())
	if err != nil {
		return nil, err
	}
	kind, _ := json.Marshal(s.ListKind())
	apiVersion, _ := json.Marshal(s.GVR.GroupVersion().String())
	head := make([]byte, 0, 48+len(kind)+len(apiVersion)+len(metaJSON))
	head = append(head, `{"kind":`...)
	head = append(head, kind...)
	head = append(head, `,"apiVersion":`...)
	head = append(head, apiVersion...)
	head = append(head, `,"metadata":`...)
	head = append(head, metaJSON...)
	head = append(head, `,"items":[`...)
	b := &ListBody{head: head, items: make([][]byte, len(p.res.KVs)), tail: []byte("]}\n")}
	b.size = len(b.head) + len(b.tail)
	for i, kv := range p.res.KVs {
		if b.items[i], err = s.storage.ItemJSON(kv); err != nil {
			return nil, err
		}
		b.size += len(b.items[i])
	}
	if n := len(b.items); n > 1 {
		b.size += n - 1 // commas
	}
	return b, nil
}

// Protobuf tags of what a protobuf list response is made of: kube's
// runtime.Unknown envelope (typeMeta = 1, raw = 2, contentEncoding = 3,
// contentType = 4, after the "k8s\x00" magic), around the list message of
// every built-in list type (metadata = 1, items = 2).
const (
	pbUnknownTypeMeta        = 0x0a
	pbUnknownRaw             = 0x12
	pbUnknownContentEncoding = 0x1a
	pbUnknownContentType     = 0x22
	pbListMeta               = 0x0a
	pbListItem               = 0x12
)

// pbMagic starts every protobuf object kube writes.
var pbMagic = []byte{0x6b, 0x38, 0x73, 0x00}

// Protobuf is what kube's protobuf serializer writes for the page as the
// external list: the magic, then runtime.Unknown whose raw field is the list
// message (its metadata, then each item as field 2).
func (p *ListPage) Protobuf() (*ListBody, error) {
	s := p.st
	lm := p.listMeta()
	metaPB, err := lm.Marshal()
	if err != nil {
		return nil, err
	}
	b := &ListBody{items: make([][]byte, len(p.res.KVs)), pb: true}
	list := 1 + sov(len(metaPB)) + len(metaPB)
	for i, kv := range p.res.KVs {
		if b.items[i], err = s.storage.ItemProtobuf(kv); err != nil {
			return nil, err
		}
		list += 1 + sov(len(b.items[i])) + len(b.items[i])
	}
	gv := s.GVR.GroupVersion()
	tm := runtime.TypeMeta{APIVersion: gv.String(), Kind: s.ListKind()}
	tmPB, err := tm.Marshal()
	if err != nil {
		return nil, err
	}
	head := append([]byte(nil), pbMagic...)
	head = append(head, pbUnknownTypeMeta)
	head = binary.AppendUvarint(head, uint64(len(tmPB)))
	head = append(head, tmPB...)
	head = append(head, pbUnknownRaw)
	head = binary.AppendUvarint(head, uint64(list))
	head = append(head, pbListMeta)
	head = binary.AppendUvarint(head, uint64(len(metaPB)))
	head = append(head, metaPB...)
	b.head = head
	// An empty contentEncoding and contentType, which kube always writes.
	b.tail = []byte{pbUnknownContentEncoding, 0, pbUnknownContentType, 0}
	b.size = len(head) - (1 + sov(len(metaPB)) + len(metaPB)) + list + len(b.tail)
	return b, nil
}

// sov is the length of n as a protobuf varint.
func sov(n int) int { return (bits.Len64(uint64(n)|1) + 6) / 7 }

// Size is the number of bytes WriteTo writes.
func (b *ListBody) Size() int { return b.size }

// listChunk is the size of the writes WriteTo makes: large enough that a
// list costs few writes to the connection or the compressor, small enough
// to be pooled, so a large list no longer allocates its whole body.
const listChunk = 64 << 10

var listChunks = sync.Pool{New: func() any {
	b := make([]byte, 0, listChunk)
	return &b
}}

// WriteTo writes the body to w in writes of about listChunk bytes through a
// pooled buffer.
func (b *ListBody) WriteTo(w io.Writer) (int64, error) {
	bp := listChunks.Get().(*[]byte)
	defer listChunks.Put(bp)
	cw := chunkWriter{w: w, buf: (*bp)[:0]}
	cw.put(b.head)
	var frame [1 + binary.MaxVarintLen64]byte
	for i, item := range b.items {
		switch {
		case b.pb:
			frame[0] = pbListItem
			cw.put(binary.AppendUvarint(frame[:1], uint64(len(item))))
		case i > 0:
			cw.put(comma)
		}
		cw.put(item)
	}
	cw.put(b.tail)
	cw.flush()
	return cw.n, cw.err
}

var comma = []byte{','}

// chunkWriter gathers small writes into buf and passes large ones through;
// after an error it writes nothing more.
type chunkWriter struct {
	w   io.Writer
	buf []byte
	n   int64
	err error
}

func (c *chunkWriter) put(p []byte) {
	if len(c.buf)+len(p) > cap(c.buf) {
		c.flush()
		if len(p) > cap(c.buf) {
			c.write(p)
			return
		}
	}
	c.buf = append(c.buf, p...)
}

func (c *chunkWriter) flush() {
	if len(c.buf) > 0 {
		c.write(c.buf)
		c.buf = c.buf[:0]
	}
}

func (c *chunkWriter) write(p []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
}
