package wire

import (
	"bytes"
	"encoding/json"
)

// WholeObject reports whether raw is one whole object as the apiserver writes it: valid JSON
// that is an object, or a protobuf envelope whose fields and message all parse to their ends. A
// torn or malformed object (a body cut short, a broken proxy's bytes) is not whole, so the cache
// never keeps one to serve later.
func WholeObject(raw []byte) bool {
	if IsProtobuf(raw) {
		_, _, msg, err := DecodeProtoEnvelope(raw)
		return err == nil && protoFields(msg, func(field) bool { return true }) == nil
	}
	raw = bytes.TrimSpace(raw)
	return len(raw) > 1 && raw[0] == '{' && json.Valid(raw)
}
