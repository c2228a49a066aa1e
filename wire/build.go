package wire

import (
	"bytes"
	"encoding/json"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InitialEventsEnd is the annotation of the BOOKMARK that ends a watch's initial events.
const InitialEventsEnd = "k8s.io/initial-events-end"

// ListBuilder joins raw objects into a List body, in JSON or protobuf, without decoding them.
type ListBuilder struct {
	Protobuf         bool
	APIVersion, Kind string // the items'; the list is Kind+"List"
	buf              bytes.Buffer
	n                int
}

// Add appends one item (already in the builder's format).
func (b *ListBuilder) Add(item []byte) error {
	if b.Protobuf {
		_, _, raw, err := DecodeProtoEnvelope(item)
		if err != nil {
			return err
		}
		var h [16]byte
		b.buf.Write(AppendProtoListItemHead(h[:0], len(raw)))
		b.buf.Write(raw)
	} else {
		if b.n > 0 {
			b.buf.WriteByte(',')
		}
		b.buf.Write(bytes.TrimSpace(item))
	}
	b.n++
	return nil
}

// Bytes returns the List with resourceVersion rv.
func (b *ListBuilder) Bytes(rv string) ([]byte, error) { return b.BytesContinue(rv, "") }

// BytesContinue returns the List with resourceVersion rv and a continue token.
func (b *ListBuilder) BytesContinue(rv, cont string) ([]byte, error) {
	av, kind := b.APIVersion, b.Kind+"List"
	if b.Kind == "" {
		av, kind = "v1", "List"
	}
	if b.Protobuf {
		lm := appendBytesField(nil, 2, []byte(rv))
		if cont != "" {
			lm = appendBytesField(lm, 3, []byte(cont))
		}
		meta := appendBytesField(nil, 1, lm)
		return encodeEnvelope(av, kind, true, meta, b.buf.Bytes()), nil
	}
	c := ""
	if cont != "" {
		c = `,"continue":` + quote(cont)
	}
	head := `{"kind":` + quote(kind) + `,"apiVersion":` + quote(av) + `,"metadata":{"resourceVersion":` + quote(rv) + c + `},"items":[`
	out := make([]byte, 0, len(head)+b.buf.Len()+3)
	out = append(append(append(out, head...), b.buf.Bytes()...), "]}\n"...)
	return out, nil
}

// BookmarkObject is the object of a BOOKMARK event: only its kind and resourceVersion (and, to
// end a watch's initial events, the k8s.io/initial-events-end annotation).
func BookmarkObject(apiVersion, kind, rv string, initialEnd, protobuf bool) []byte {
	if protobuf {
		meta := appendBytesField(nil, 6, []byte(rv))
		if initialEnd {
			entry := appendBytesField(appendBytesField(nil, 1, []byte(InitialEventsEnd)), 2, []byte("true"))
			meta = appendBytesField(meta, 12, entry)
		}
		b, _ := EncodeProtoRaw(apiVersion, kind, appendBytesField(nil, 1, meta))
		return b
	}
	ann := ""
	if initialEnd {
		ann = `,"annotations":{"` + InitialEventsEnd + `":"true"}`
	}
	return []byte(`{"kind":` + quote(kind) + `,"apiVersion":` + quote(apiVersion) + `,"metadata":{"resourceVersion":` + quote(rv) + ann + `}}`)
}

// EndsInitialEvents reports whether a BOOKMARK's object carries the k8s.io/initial-events-end
// annotation: the watch-list's initial events (its list) are all sent. A bookmark object is
// small (a type, a resourceVersion, this annotation); its metadata is decoded only when the
// annotation's name is in its bytes.
func EndsInitialEvents(obj []byte) bool {
	if !bytes.Contains(obj, []byte(InitialEventsEnd)) {
		return false
	}
	om, err := ObjectMeta(obj)
	return err == nil && om.Annotations[InitialEventsEnd] == "true"
}

// ObjectMeta decodes just an object's metadata from its raw bytes.
func ObjectMeta(raw []byte) (metav1.ObjectMeta, error) {
	var om metav1.ObjectMeta
	if IsProtobuf(raw) {
		_, _, obj, err := DecodeProtoEnvelope(raw)
		if err != nil {
			return om, err
		}
		m, ok := protoLookup(obj, []int{1})
		if !ok || m.typ != wireBytes {
			return om, fmt.Errorf("wire: object without metadata")
		}
		return om, om.Unmarshal(m.data)
	}
	var obj struct {
		Metadata metav1.ObjectMeta `json:"metadata"`
	}
	err := json.Unmarshal(raw, &obj)
	return obj.Metadata, err
}

// PartialObjectMetadata returns an object's metadata as a meta.k8s.io/v1 PartialObjectMetadata.
func PartialObjectMetadata(raw []byte) (*metav1.PartialObjectMetadata, error) {
	om, err := ObjectMeta(raw)
	if err != nil {
		return nil, err
	}
	return &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "meta.k8s.io/v1", Kind: "PartialObjectMetadata"}, ObjectMeta: om}, nil
}

// EncodeMeta encodes a PartialObjectMetadata or PartialObjectMetadataList.
func EncodeMeta(obj ProtoMessage, kind string, protobuf bool) ([]byte, error) {
	if protobuf {
		return EncodeProto("meta.k8s.io/v1", kind, obj)
	}
	return json.Marshal(obj)
}
