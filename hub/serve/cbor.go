package serve

import (
	"net/http"
	"strings"

	"nodehub/wire"
)

// CBOR (the apiserver's CBORServingAndStorage, client-go's ClientsPreferCBOR) is neither kept,
// filtered nor answered offline by the hub, which reads JSON and protobuf. A client that takes
// JSON or protobuf too is asked for them upstream (askWithoutCBOR): its answer is filtered,
// cached, and offline answered from the cache in what it accepts. A client that takes CBOR
// alone is served only by the cloud, unfiltered and uncached (cborOnly): never by a shared store,
// a filter chain or the hub's own copies of the node and its lease, which would answer it in
// another encoding than it asked for. A lease written in CBOR is answered 415 (client-go then
// sends JSON).

// askWithoutCBOR drops CBOR from the Accept of a resource request going upstream, when the
// client accepts something else.
func askWithoutCBOR(ri *wire.RequestInfo, out http.Header) {
	if !ri.IsResource {
		return
	}
	if accept, ok := wire.WithoutCBOR(acceptOf(out)); ok {
		out.Set("Accept", accept)
	}
}

// cborOnly reports whether a resource request's client accepts CBOR and nothing else.
func cborOnly(ri *wire.RequestInfo, r *http.Request) bool {
	return ri.IsResource && wire.CBOROnly(acceptOf(r.Header))
}

func acceptOf(h http.Header) string { return strings.Join(h.Values("Accept"), ",") }
