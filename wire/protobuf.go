package wire

import (
	"bytes"
	"errors"
	"fmt"
)

// protoMagic starts every Kubernetes protobuf body: "k8s" and a zero byte, then a runtime.Unknown.
var protoMagic = []byte{'k', '8', 's', 0}

// IsProtobuf reports whether body starts with the Kubernetes protobuf magic.
func IsProtobuf(body []byte) bool { return bytes.HasPrefix(body, protoMagic) }

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

// EncodeProtoRaw wraps already-encoded message bytes in the envelope (one allocation: the
// envelope is written as runtime.Unknown's generated code writes it, raw copied once).
func EncodeProtoRaw(apiVersion, kind string, raw []byte) ([]byte, error) {
	if raw == nil {
		return encodeEnvelope(apiVersion, kind, false), nil
	}
	return encodeEnvelope(apiVersion, kind, true, raw), nil
}

// encodeEnvelope returns magic + runtime.Unknown{TypeMeta{apiVersion, kind}, Raw: the parts
// joined (absent unless hasRaw), ContentEncoding: "", ContentType: ""} in one allocation.
func encodeEnvelope(apiVersion, kind string, hasRaw bool, parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	size := len(protoMagic) + fieldLen(typeMetaLen(apiVersion, kind)) + len(envelopeTail)
	if hasRaw {
		size += fieldLen(n)
	}
	out := appendEnvelopeTypeMeta(make([]byte, 0, size), apiVersion, kind)
	if hasRaw {
		out = appendVarint(out, 2<<3|wireBytes)
		out = appendVarint(out, uint64(n))
		for _, p := range parts {
			out = append(out, p...)
		}
	}
	return append(out, envelopeTail...)
}

// envelopeTail ends an envelope: its empty contentEncoding and contentType, as the apiserver
// writes them.
var envelopeTail = []byte{3<<3 | wireBytes, 0, 4<<3 | wireBytes, 0}

func typeMetaLen(apiVersion, kind string) int {
	return fieldLen(len(apiVersion)) + fieldLen(len(kind))
}

// appendEnvelopeTypeMeta appends the magic and the envelope's TypeMeta field: what comes before
// its raw field.
func appendEnvelopeTypeMeta(b []byte, apiVersion, kind string) []byte {
	b = append(b, protoMagic...)
	b = appendVarint(b, 1<<3|wireBytes)
	b = appendVarint(b, uint64(typeMetaLen(apiVersion, kind)))
	b = appendStringField(b, 1, apiVersion)
	return appendStringField(b, 2, kind)
}

// DecodeProtoEnvelope opens the envelope and returns apiVersion, kind and the message bytes (which
// alias body: nothing is copied).
func DecodeProtoEnvelope(body []byte) (apiVersion, kind string, raw []byte, err error) {
	if !IsProtobuf(body) {
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
