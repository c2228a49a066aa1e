package wire

import "strings"

// MediaCBOR is CBOR as the apiserver serves it (its CBORServingAndStorage feature, alpha since
// v1.32) to a client that opts in (client-go's ClientsAllowCBOR and ClientsPreferCBOR); a watch
// answer is a CBOR sequence, MediaCBORSeq.
const (
	MediaCBOR    = "application/cbor"
	MediaCBORSeq = "application/cbor-seq"
)

// IsCBOR reports whether the media type is CBOR: one item, a sequence, or an apply patch in CBOR.
func (m MediaType) IsCBOR() bool {
	return m.Type == MediaCBOR || m.Type == MediaCBORSeq || m.Type == "application/apply-patch+cbor"
}

// WithoutCBOR returns an Accept header without its CBOR entries, and whether any were dropped.
// nodehub keeps, filters and answers offline JSON and protobuf only: a client that also takes
// one of those (client-go preferring CBOR sends "application/cbor, */*") is asked for it upstream,
// and gets an answer the filters read and the cache keeps. A header of CBOR alone is returned as
// it is (false): CBOROnly says so.
func WithoutCBOR(accept string) (string, bool) {
	if !strings.Contains(strings.ToLower(accept), "cbor") {
		return accept, false
	}
	var kept []string
	for _, part := range strings.Split(accept, ",") {
		m := ParseMediaType(part)
		if m.Type == "" || m.IsCBOR() {
			continue
		}
		kept = append(kept, strings.TrimSpace(part))
	}
	if len(kept) == 0 {
		return accept, false
	}
	return strings.Join(kept, ", "), true
}

// CBOROnly reports whether an Accept header names CBOR and nothing else: a client nodehub can
// answer neither from the cache nor through its filters.
func CBOROnly(accept string) bool {
	if !strings.Contains(strings.ToLower(accept), "cbor") {
		return false
	}
	_, dropped := WithoutCBOR(accept)
	return !dropped
}
