package local

import (
	"encoding/json"
	"errors"

	"nodehub/wire"
)

// A write of an object's status subresource changes its status alone, as the apiserver's status
// strategies do (a pod's or node's spec and metadata are the old object's whatever the write
// says): offline, a status write that also carried a pod's containers or volumes would otherwise
// put them in the copy kubelet reads back, something the node's own credential cannot do online
// (the apiserver ignores them; NodeRestriction forbids a node to change a pod's spec).

// errNoStatus is a status write whose result is not an object with a status.
var errNoStatus = errors.New("nodehub: a status write's result is not an object")

// statusOnly returns old with its status replaced by result's, in old's encoding. Both are
// decoded (JSON or protobuf) only here, for a status write.
func statusOnly(old, result []byte) ([]byte, error) {
	proto := ctOf(old) == wire.MediaProtobuf
	oldJSON, err := wire.Convert(old, false)
	if err != nil {
		return nil, err
	}
	newJSON, err := wire.Convert(result, false)
	if err != nil {
		return nil, err
	}
	var o, n map[string]json.RawMessage
	if json.Unmarshal(oldJSON, &o) != nil || json.Unmarshal(newJSON, &n) != nil || o == nil || n == nil {
		return nil, errNoStatus
	}
	if st, ok := n["status"]; ok {
		o["status"] = st
	} else {
		delete(o, "status")
	}
	merged, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	return wire.Convert(merged, proto)
}
