package local

import (
	"fmt"
	"net/http"

	"nodehub/cache"
	"nodehub/wire"
)

// An offline change that names a metadata.resourceVersion other than the cached copy's is
// answered 409 Conflict, as the apiserver answers an update from a client holding an old copy: a
// full update (PUT) would otherwise silently drop what another node client wrote since (a node's
// annotations). An empty resourceVersion is an unconditional update. The result is read before a
// status write keeps the old metadata (statusonly.go), so a patch that names one is held to it too.

// conflict returns a 409 statusError when the change's result names a resourceVersion other than
// the cached copy's, nil otherwise.
func conflict(result []byte, ri *wire.RequestInfo, cached *cache.Header) error {
	m, err := wire.ExtractMeta(result, ri.Resource)
	if err != nil || m.ResourceVersion == "" || m.ResourceVersion == cached.ResourceVersion {
		return nil // an undecodable result is refused later, with the name check
	}
	what := ri.Resource
	if ri.Group != "" {
		what += "." + ri.Group
	}
	return &statusError{code: http.StatusConflict, msg: fmt.Sprintf(
		"Operation cannot be fulfilled on %s %q: the object has been modified; please apply your changes to the latest version and try again",
		what, cached.Name)}
}
