package tokens

import (
	"encoding/binary"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// TokenRequest is authentication.k8s.io/v1 TokenRequest, with its own protobuf codec: the
// generated k8s.io/api package would cost the appliance's binary more than this file. Its JSON and
// protobuf forms are the apiserver's; attestations, which nodehub never reads, pass through as
// they came.
type TokenRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              TokenRequestSpec   `json:"spec"`
	Status            TokenRequestStatus `json:"status,omitempty"`
}

// TokenRequestSpec is authentication.k8s.io/v1 TokenRequestSpec.
type TokenRequestSpec struct {
	Audiences         []string              `json:"audiences"`
	ExpirationSeconds *int64                `json:"expirationSeconds"`
	BoundObjectRef    *BoundObjectReference `json:"boundObjectRef"`
	Attestations      rawJSON               `json:"attestations,omitempty"`
	attestations      [][]byte              // protobuf map entries (field 5), as they came
}

// BoundObjectReference is authentication.k8s.io/v1 BoundObjectReference.
type BoundObjectReference struct {
	Kind       string    `json:"kind,omitempty"`
	APIVersion string    `json:"apiVersion,omitempty"`
	Name       string    `json:"name,omitempty"`
	UID        types.UID `json:"uid,omitempty"`
}

// TokenRequestStatus is authentication.k8s.io/v1 TokenRequestStatus.
type TokenRequestStatus struct {
	Token               string      `json:"token"`
	ExpirationTimestamp metav1.Time `json:"expirationTimestamp"`
}

// rawJSON keeps a JSON value as it came (nil: absent).
type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) {
	if r == nil {
		return []byte("null"), nil
	}
	return r, nil
}

func (r *rawJSON) UnmarshalJSON(b []byte) error {
	*r = append((*r)[:0], b...)
	return nil
}

// DeepCopy returns a copy that shares nothing mutable with tr.
func (tr *TokenRequest) DeepCopy() *TokenRequest {
	out := *tr
	tr.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Audiences = append([]string(nil), tr.Spec.Audiences...)
	if tr.Spec.ExpirationSeconds != nil {
		v := *tr.Spec.ExpirationSeconds
		out.Spec.ExpirationSeconds = &v
	}
	if tr.Spec.BoundObjectRef != nil {
		ref := *tr.Spec.BoundObjectRef
		out.Spec.BoundObjectRef = &ref
	}
	out.Spec.Attestations = append(rawJSON(nil), tr.Spec.Attestations...)
	if tr.Spec.Attestations == nil {
		out.Spec.Attestations = nil
	}
	out.Spec.attestations = append([][]byte(nil), tr.Spec.attestations...)
	return &out
}

// Marshal encodes the request as the generated code does: metadata=1, spec=2, status=3, and in
// each the fields that are set, by number.
func (tr *TokenRequest) Marshal() ([]byte, error) {
	meta, err := tr.ObjectMeta.Marshal()
	if err != nil {
		return nil, err
	}
	var spec []byte
	for _, a := range tr.Spec.Audiences {
		spec = appendBytes(spec, 1, []byte(a))
	}
	if ref := tr.Spec.BoundObjectRef; ref != nil {
		var b []byte
		b = appendBytes(b, 1, []byte(ref.Kind))
		b = appendBytes(b, 2, []byte(ref.APIVersion))
		b = appendBytes(b, 3, []byte(ref.Name))
		b = appendBytes(b, 4, []byte(ref.UID))
		spec = appendBytes(spec, 3, b)
	}
	if tr.Spec.ExpirationSeconds != nil {
		spec = binary.AppendUvarint(binary.AppendUvarint(spec, 4<<3), uint64(*tr.Spec.ExpirationSeconds))
	}
	for _, e := range tr.Spec.attestations {
		spec = appendBytes(spec, 5, e)
	}
	ts, err := tr.Status.ExpirationTimestamp.Marshal()
	if err != nil {
		return nil, err
	}
	var status []byte
	status = appendBytes(status, 1, []byte(tr.Status.Token))
	status = appendBytes(status, 2, ts)
	var out []byte
	out = appendBytes(out, 1, meta)
	out = appendBytes(out, 2, spec)
	return appendBytes(out, 3, status), nil
}

// Unmarshal decodes the protobuf form.
func (tr *TokenRequest) Unmarshal(b []byte) error {
	*tr = TokenRequest{}
	return fields(b, func(num int, v uint64, data []byte) error {
		switch num {
		case 1:
			return tr.ObjectMeta.Unmarshal(data)
		case 2:
			return fields(data, func(num int, v uint64, data []byte) error {
				switch num {
				case 1:
					tr.Spec.Audiences = append(tr.Spec.Audiences, string(data))
				case 3:
					ref := &BoundObjectReference{}
					tr.Spec.BoundObjectRef = ref
					return fields(data, func(num int, _ uint64, data []byte) error {
						switch num {
						case 1:
							ref.Kind = string(data)
						case 2:
							ref.APIVersion = string(data)
						case 3:
							ref.Name = string(data)
						case 4:
							ref.UID = types.UID(data)
						}
						return nil
					})
				case 4:
					s := int64(v)
					tr.Spec.ExpirationSeconds = &s
				case 5:
					tr.Spec.attestations = append(tr.Spec.attestations, append([]byte(nil), data...))
				}
				return nil
			})
		case 3:
			return fields(data, func(num int, _ uint64, data []byte) error {
				switch num {
				case 1:
					tr.Status.Token = string(data)
				case 2:
					return tr.Status.ExpirationTimestamp.Unmarshal(data)
				}
				return nil
			})
		}
		return nil
	})
}

var errTruncated = errors.New("tokens: truncated protobuf")

// fields calls fn with each field of a protobuf message: its number, its varint value (varint
// fields) and its payload (length-delimited fields).
func fields(b []byte, fn func(num int, v uint64, data []byte) error) error {
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 || tag>>3 == 0 || tag>>3 > 1<<29 {
			return errTruncated
		}
		b = b[n:]
		num := int(tag >> 3)
		var v uint64
		var data []byte
		switch tag & 7 {
		case 0:
			if v, n = binary.Uvarint(b); n <= 0 {
				return errTruncated
			}
			b = b[n:]
		case 1:
			if len(b) < 8 {
				return errTruncated
			}
			b = b[8:]
		case 2:
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return errTruncated
			}
			data, b = b[n:n+int(l)], b[n+int(l):]
		case 5:
			if len(b) < 4 {
				return errTruncated
			}
			b = b[4:]
		default:
			return fmt.Errorf("tokens: protobuf wire type %d", tag&7)
		}
		if err := fn(num, v, data); err != nil {
			return err
		}
	}
	return nil
}

func appendBytes(b []byte, num int, data []byte) []byte {
	b = binary.AppendUvarint(b, uint64(num)<<3|2)
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}
