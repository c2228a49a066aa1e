package cache

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/wire"
)

// profileSlice is an EndpointSlice as the apiserver sends the node profile's (bench -only
// profile): a 10-endpoint slice with its own uid, timestamps and managed fields.
func profileSlice(i, gen int) []byte {
	s := benchSlice(i, gen)
	s.UID = "610627ee-1ddd-42b0-8911-cba9f80b15a0"
	s.ResourceVersion = fmt.Sprint(3000 + gen)
	s.CreationTimestamp = metav1.NewTime(time.Unix(1795000000, 0))
	s.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "bench", Operation: metav1.ManagedFieldsOperationUpdate,
		APIVersion: "discovery.k8s.io/v1", Time: &s.CreationTimestamp, FieldsType: "FieldsV1",
		FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:addressType":{},"f:endpoints":{},"f:metadata":{"f:labels":{".":{},"f:kubernetes.io/service-name":{}}},"f:ports":{}}`)}}}
	s.Labels = map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("svc-%04d", i)}
	raw, _ := wire.EncodeProto("discovery.k8s.io/v1", "EndpointSlice", s)
	return raw
}

// Flash wears by the pages written: at one sync a second, an update of a slice costs its record
// plus a share of the log's last page, written again at each sync (4 KiB a second). At the node
// profile's 10 updates a second, ≤ 1 KB of block writes per update needs a record of a 1.6 KB
// slice (and its header) well under 590 bytes; the preset dictionary brings it from ~630 to ~460.
func TestASliceUpdateAppendsASmallRecord(t *testing.T) {
	s, err := Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := Resource{Owner: "nodehub", Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	const n = 100
	var body int
	for i := 0; i < n; i++ {
		raw := profileSlice(i, i+1)
		body += len(raw)
		m, _ := wire.ExtractMeta(raw, "endpointslices")
		h := headerFor(m, wire.MediaProtobuf)
		if err := s.Put(Key{Resource: r, Namespace: m.Namespace, Name: m.Name}, &h, raw); err != nil {
			t.Fatal(err)
		}
	}
	per := s.Stats().BytesWritten / n
	t.Logf("%d B per record for a %d B slice", per, body/n)
	if per > 500 {
		t.Fatalf("%d bytes appended per slice update (a %d-byte slice), want ≤ 500", per, body/n)
	}
}

// A record compressed before the dictionary (issue 32) reads as it did.
func TestARecordCompressedWithoutTheDictionaryStillOpens(t *testing.T) {
	raw := profileSlice(1, 1)
	m, _ := wire.ExtractMeta(raw, "endpointslices")
	h := headerFor(m, wire.MediaProtobuf)
	hdr := h.marshal()
	old := lzEncode(binary.AppendUvarint(nil, uint64(len(hdr))), append(append([]byte{}, hdr...), raw...))
	p := payload{typ: recPut, flags: flagJoint, body: old}
	gh, gb, err := p.open()
	if err != nil || !bytes.Equal(gh, hdr) || !bytes.Equal(gb, raw) {
		t.Fatalf("old record: %v", err)
	}
	if gh, _, err := p.openHeader(nil); err != nil || !bytes.Equal(gh, hdr) {
		t.Fatalf("old record's header: %v", err)
	}
	if _, _, err := (payload{typ: recPut, flags: flagDict, body: old}).open(); err == nil {
		t.Fatal("the dictionary flag alone opened")
	}
}

// The dictionary is part of the stored format: records written with it are read with it, so it
// is never edited (a new one takes a new flag).
func TestThePresetDictionaryIsNeverEdited(t *testing.T) {
	if sum, n := crc32.ChecksumIEEE([]byte(lzDict)), len(lzDict); sum != 0x210c6b27 || n != 2502 {
		t.Fatalf("lzDict changed: %d bytes, CRC-32 %#x: records compressed with it would no longer open", n, sum)
	}
}
