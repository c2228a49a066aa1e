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
// (the apiserver ignores them; NodeRestriction forbids a node to change a pod's spec). One
// exception: a node status write keeps the annotations it sets, as the apiserver's node status
// strategy does (it resets the spec alone); flannel writes its annotations that way.

// errNoStatus is a status write whose result is not an object with a status.
var errNoStatus = errors.New("nodehub: a status write's result is not an object")

// statusOnly returns old with its status replaced by result's, in old's encoding. Both are
// decoded (JSON or protobuf) only here, for a status write.
func statusOnly(old, result []byte, node bool) ([]byte, error) {
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
	if node {
		if o["metadata"], err = withAnnotations(o["metadata"], n["metadata"]); err != nil {
			return nil, err
		}
	}
	merged, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	return wire.Convert(merged, proto)
}

// withAnnotations returns metadata old with the annotations of metadata result.
func withAnnotations(old, result json.RawMessage) (json.RawMessage, error) {
	var o, n map[string]json.RawMessage
	if json.Unmarshal(old, &o) != nil || json.Unmarshal(result, &n) != nil || o == nil || n == nil {
		return nil, errNoStatus
	}
	if a, ok := n["annotations"]; ok {
		o["annotations"] = a
	} else {
		delete(o, "annotations")
	}
	return json.Marshal(o)
}
