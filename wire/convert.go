package wire

import (
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Typed is a k8s.io/api object: it knows its kind and speaks protobuf (and JSON, through its tags).
type Typed interface {
	ProtoMessage
	GetObjectKind() schema.ObjectKind
}

// typedKinds are the built-in kinds nodehub decodes: to convert between JSON and protobuf (a client
// asking another format than the cache holds, offline) and to patch them. Custom resources are
// JSON only and never need converting.
var typedKinds = map[string]func() Typed{
	"v1/Pod":                            func() Typed { return &corev1.Pod{} },
	"v1/Node":                           func() Typed { return &corev1.Node{} },
	"v1/Service":                        func() Typed { return &corev1.Service{} },
	"v1/Endpoints":                      func() Typed { return &corev1.Endpoints{} },
	"v1/ConfigMap":                      func() Typed { return &corev1.ConfigMap{} },
	"v1/Secret":                         func() Typed { return &corev1.Secret{} },
	"v1/Namespace":                      func() Typed { return &corev1.Namespace{} },
	"v1/Event":                          func() Typed { return &corev1.Event{} },
	"v1/ServiceAccount":                 func() Typed { return &corev1.ServiceAccount{} },
	"v1/PersistentVolume":               func() Typed { return &corev1.PersistentVolume{} },
	"v1/PersistentVolumeClaim":          func() Typed { return &corev1.PersistentVolumeClaim{} },
	"discovery.k8s.io/v1/EndpointSlice": func() Typed { return &discoveryv1.EndpointSlice{} },
	"coordination.k8s.io/v1/Lease":      func() Typed { return &Lease{} },
}

// ErrNotConvertible is returned for an object of a kind nodehub cannot decode.
var ErrNotConvertible = errors.New("wire: cannot convert this kind")

// NewTyped returns an empty object of apiVersion/kind, or nil when nodehub does not know the kind.
func NewTyped(apiVersion, kind string) Typed {
	if f := typedKinds[apiVersion+"/"+kind]; f != nil {
		obj := f()
		obj.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(apiVersion, kind))
		return obj
	}
	return nil
}

// Decode reads a raw object (JSON or the protobuf envelope) into its typed form.
func Decode(raw []byte) (Typed, error) {
	if IsProtobuf(raw) {
		av, kind, body, err := DecodeProtoEnvelope(raw)
		if err != nil {
			return nil, err
		}
		obj := NewTyped(av, kind)
		if obj == nil {
			return nil, fmt.Errorf("%w: %s/%s", ErrNotConvertible, av, kind)
		}
		if err := obj.Unmarshal(body); err != nil {
			return nil, fmt.Errorf("wire: decode %s: %w", kind, err)
		}
		return obj, nil
	}
	var tm struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(raw, &tm); err != nil {
		return nil, fmt.Errorf("wire: decode: %w", err)
	}
	obj := NewTyped(tm.APIVersion, tm.Kind)
	if obj == nil {
		return nil, fmt.Errorf("%w: %s/%s", ErrNotConvertible, tm.APIVersion, tm.Kind)
	}
	if err := json.Unmarshal(raw, obj); err != nil {
		return nil, fmt.Errorf("wire: decode %s: %w", tm.Kind, err)
	}
	obj.GetObjectKind().SetGroupVersionKind(schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind))
	return obj, nil
}

// Encode writes a typed object as JSON or in the protobuf envelope.
func Encode(obj Typed, protobuf bool) ([]byte, error) {
	gvk := obj.GetObjectKind().GroupVersionKind()
	if protobuf {
		av, kind := gvk.ToAPIVersionAndKind()
		return EncodeProto(av, kind, obj)
	}
	return json.Marshal(obj)
}

// Convert returns a raw object in the other format when needed: unchanged when it already is in
// the wanted one.
func Convert(raw []byte, protobuf bool) ([]byte, error) {
	if IsProtobuf(raw) == protobuf {
		return raw, nil
	}
	obj, err := Decode(raw)
	if err != nil {
		return nil, err
	}
	return Encode(obj, protobuf)
}
