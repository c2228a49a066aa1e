package cache

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"strconv"

	"nodehub/wire"
)

// One cache file is a fixed preamble, a small binary header and the object's raw bytes:
//
//	"NHCF" | version (1 byte) | 3 reserved bytes | header length (u32 BE) | body length (u32 BE) |
//	CRC-32C of header and body (u32 BE) | header | body
//
// A file whose size or checksum does not match is torn or corrupt and is never served.

const (
	fileMagic   = "NHCF"
	fileVersion = 1
	preambleLen = 20
	// maxHeader bounds a header (labels and selectable fields included): as large as the objects
	// nodehub accepts, so an object with megabytes of labels is cached and read back.
	maxHeader = wire.MaxObjectBytes
	maxBody   = 64 << 20
)

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// ErrCorrupt is returned for a file that is torn, truncated or fails its checksum.
var ErrCorrupt = errors.New("cache: corrupt file")

// Header is what a cache file says about the object it holds.
type Header struct {
	ContentType     string            `json:"ct"`
	APIVersion      string            `json:"av,omitempty"`
	Kind            string            `json:"kind,omitempty"`
	Namespace       string            `json:"ns,omitempty"`
	Name            string            `json:"name"`
	UID             string            `json:"uid,omitempty"`
	ResourceVersion string            `json:"rv,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	Fields          map[string]string `json:"fields,omitempty"`
	// Local marks an object changed by the hub while offline; the cloud's copy replaces it.
	Local bool `json:"local,omitempty"`
}

// Meta returns the header as wire.Meta, for selector evaluation.
func (h *Header) Meta() wire.Meta {
	return wire.Meta{APIVersion: h.APIVersion, Kind: h.Kind, Namespace: h.Namespace, Name: h.Name, UID: h.UID,
		ResourceVersion: h.ResourceVersion, Labels: h.Labels, Fields: h.Fields}
}

// headerFor builds the header of an object from its metadata.
func headerFor(m wire.Meta, contentType string) Header {
	return Header{ContentType: contentType, APIVersion: m.APIVersion, Kind: m.Kind, Namespace: m.Namespace, Name: m.Name,
		UID: m.UID, ResourceVersion: m.ResourceVersion, Labels: m.Labels, Fields: m.Fields}
}

// encodeFile returns the bytes of a cache file.
func encodeFile(h *Header, body []byte) ([]byte, error) {
	hj := h.marshal()
	out := make([]byte, preambleLen, preambleLen+len(hj)+len(body))
	copy(out, fileMagic)
	out[4] = fileVersion
	binary.BigEndian.PutUint32(out[8:], uint32(len(hj)))
	binary.BigEndian.PutUint32(out[12:], uint32(len(body)))
	crc := crc32.Update(crc32.Checksum(hj, crcTable), crcTable, body)
	binary.BigEndian.PutUint32(out[16:], crc)
	out = append(out, hj...)
	return append(out, body...), nil
}

// decodeFile checks a whole cache file and returns its header and body (which alias data).
// A file without the preamble that holds a JSON object is read as a YurtHub cache file.
func decodeFile(data []byte, resource string) (*Header, []byte, error) {
	if !bytes.HasPrefix(data, []byte(fileMagic)) {
		return decodeYurtHubFile(data, resource)
	}
	if len(data) < preambleLen || data[4] != fileVersion {
		return nil, nil, fmt.Errorf("%w: bad preamble", ErrCorrupt)
	}
	hl, bl := binary.BigEndian.Uint32(data[8:]), binary.BigEndian.Uint32(data[12:])
	if hl > maxHeader || bl > maxBody || uint64(len(data)) != uint64(preambleLen)+uint64(hl)+uint64(bl) {
		return nil, nil, fmt.Errorf("%w: size %d does not match its lengths", ErrCorrupt, len(data))
	}
	hj, body := data[preambleLen:preambleLen+hl], data[preambleLen+hl:]
	if crc32.Update(crc32.Checksum(hj, crcTable), crcTable, body) != binary.BigEndian.Uint32(data[16:]) {
		return nil, nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	h := &Header{}
	if err := h.unmarshal(hj); err != nil {
		return nil, nil, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	return h, body, nil
}

// decodeYurtHubFile reads a file YurtHub wrote: the object's JSON and nothing else.
func decodeYurtHubFile(data []byte, resource string) (*Header, []byte, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' || !json.Valid(trimmed) {
		return nil, nil, fmt.Errorf("%w: neither a nodehub nor a YurtHub cache file", ErrCorrupt)
	}
	m, err := wire.ExtractMeta(trimmed, resource)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	h := headerFor(m, wire.MediaJSON)
	return &h, trimmed, nil
}

// isRV reports whether a resourceVersion is an etcd revision (a number).
func isRV(s string) bool {
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

// newerRV reports whether resourceVersion a is newer than b (both etcd revisions); a version
// that is not a number is taken as newer, so an unknown format never blocks an update.
func newerRV(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	if err1 != nil || err2 != nil {
		return a != b
	}
	return x > y
}
