package wire

import (
	"mime"
	"strings"
)

// Media types nodehub speaks.
const (
	MediaJSON     = "application/json"
	MediaProtobuf = "application/vnd.kubernetes.protobuf"
	// MediaProtobufWatch is what the apiserver names a protobuf watch stream.
	MediaProtobufWatch = "application/vnd.kubernetes.protobuf;stream=watch"
)

// MediaType is one media type with the parameters Kubernetes clients use to ask for another shape
// of answer (as=Table;g=meta.k8s.io;v=v1, as=PartialObjectMetadataList, stream=watch).
type MediaType struct {
	// Type is the bare type ("application/json"), lower-cased; "" when the client sent none.
	Type string
	// As, Group and Version are the as=, g= and v= parameters.
	As, Group, Version string
}

// IsProtobuf reports whether the media type is Kubernetes protobuf.
func (m MediaType) IsProtobuf() bool { return m.Type == MediaProtobuf }

// ParseMediaType reads one media type; an unparsable one yields its text before ';'.
func ParseMediaType(s string) MediaType {
	s = strings.TrimSpace(s)
	switch s { // the common cases, without the cost of a full parse
	case MediaJSON, MediaProtobuf:
		return MediaType{Type: s}
	}
	t, params, err := mime.ParseMediaType(strings.TrimSpace(s))
	if err != nil {
		t, _, _ = strings.Cut(s, ";")
		return MediaType{Type: strings.ToLower(strings.TrimSpace(t))}
	}
	return MediaType{Type: t, As: params["as"], Group: params["g"], Version: params["v"]}
}

// NegotiateAccept picks the media type nodehub answers with for an Accept header: the first entry
// that is JSON or Kubernetes protobuf (or a wildcard, which means JSON), as the apiserver does.
// An empty or unusable header means JSON.
func NegotiateAccept(accept string) MediaType {
	for _, part := range strings.Split(accept, ",") {
		m := ParseMediaType(part)
		switch m.Type {
		case MediaJSON, MediaProtobuf:
			return m
		case "*/*", "application/*":
			return MediaType{Type: MediaJSON}
		}
	}
	return MediaType{Type: MediaJSON}
}

// AcceptList returns every media type of an Accept header in order (JSON for an empty header).
func AcceptList(accept string) []MediaType {
	var out []MediaType
	for _, part := range strings.Split(accept, ",") {
		if m := ParseMediaType(part); m.Type != "" {
			out = append(out, m)
		}
	}
	if len(out) == 0 {
		out = append(out, MediaType{Type: MediaJSON})
	}
	return out
}

// String writes the media type back with its parameters.
func (m MediaType) String() string {
	s := m.Type
	if m.Group != "" {
		s += ";g=" + m.Group
	}
	if m.Version != "" {
		s += ";v=" + m.Version
	}
	if m.As != "" {
		s += ";as=" + m.As
	}
	return s
}

// HeaderHasToken reports whether a comma-separated header value (Connection, Upgrade) holds
// token, in any case.
func HeaderHasToken(v, token string) bool {
	for t := range strings.SplitSeq(v, ",") {
		if strings.EqualFold(strings.TrimSpace(t), token) {
			return true
		}
	}
	return false
}
