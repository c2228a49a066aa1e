package wire

import (
	"bytes"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

// protoMagic starts every Kubernetes protobuf body: "k8s" and a zero byte, then a runtime.Unknown.
var protoMagic = []byte{'k', '8', 's', 0}

// ErrNotProtobuf is returned for a body that lacks the Kubernetes protobuf envelope.
var ErrNotProtobuf = errors.New("wire: not a kubernetes protobuf body")

// ProtoMessage is what the generated k8s.io/api types implement.
type ProtoMessage interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

// EncodeProto wraps a message in the envelope the apiserver writes: magic, then runtime.Unknown
// carrying apiVersion, kind and the message bytes.
func EncodeProto(apiVersion, kind string, m ProtoMessage) ([]byte, error) {
	raw, err := m.Marshal()
	if err != nil {
		return nil, fmt.Errorf("wire: marshal %s: %w", kind, err)
	}
	return EncodeProtoRaw(apiVersion, kind, raw)
}

// EncodeProtoRaw wraps already-encoded message bytes in the envelope.
func EncodeProtoRaw(apiVersion, kind string, raw []byte) ([]byte, error) {
	u := runtime.Unknown{Raw: raw}
	u.APIVersion, u.Kind = apiVersion, kind
	body, err := u.Marshal()
	if err != nil {
		return nil, fmt.Errorf("wire: marshal envelope of %s: %w", kind, err)
	}
	return append(append(make([]byte, 0, len(protoMagic)+len(body)), protoMagic...), body...), nil
}

// DecodeProtoEnvelope opens the envelope and returns apiVersion, kind and the message bytes (which
// alias body: nothing is copied).
func DecodeProtoEnvelope(body []byte) (apiVersion, kind string, raw []byte, err error) {
	if !bytes.HasPrefix(body, protoMagic) {
		return "", "", nil, ErrNotProtobuf
	}
	err = protoFields(body[len(protoMagic):], func(f field) bool {
		if f.typ != wireBytes {
			return true
		}
		switch f.num {
		case 1: // TypeMeta{apiVersion=1, kind=2}
			apiVersion, _ = protoPath(f.data, []int{1}, false)
			kind, _ = protoPath(f.data, []int{2}, false)
		case 2:
			raw = f.data
		}
		return true
	})
	if err != nil {
		return "", "", nil, fmt.Errorf("wire: protobuf envelope: %w", err)
	}
	return apiVersion, kind, raw, nil
}

// DecodeProto opens the envelope and unmarshals the message into m.
func DecodeProto(body []byte, m ProtoMessage) (apiVersion, kind string, err error) {
	apiVersion, kind, raw, err := DecodeProtoEnvelope(body)
	if err != nil {
		return "", "", err
	}
	if err := m.Unmarshal(raw); err != nil {
		return "", "", fmt.Errorf("wire: decode %s: %w", kind, err)
	}
	return apiVersion, kind, nil
}
