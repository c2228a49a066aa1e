package local

import (
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"nodehub/cache"
	"nodehub/wire"
)

// An offline update (PUT) keeps what the apiserver keeps of the old object whatever the client
// sent (its update path: the old uid when none is given, the creation time, the generation), and
// an unconditional update (no resourceVersion) is kept at the cached copy's resourceVersion: the
// copy never loses its version, so a client that reads it back and updates with that version is
// not refused, and one holding an older copy still is (precondition.go). A uid other than the
// cached copy's is refused 409, as the apiserver refuses it. The result is decoded and encoded
// again only when one of these changes it.

// keptOnUpdate returns result with the old object's kept fields, or result itself when it has
// them already: only the metadata is read, the object decoded only when a field must change.
func keptOnUpdate(result []byte, cached *cache.Header, old []byte) ([]byte, error) {
	got, err := wire.ObjectMeta(result)
	if err != nil {
		return result, nil // refused later, with the name check, or kept as sent (not convertible)
	}
	if got.UID != "" && cached.UID != "" && string(got.UID) != cached.UID {
		return nil, &statusError{code: http.StatusConflict, msg: fmt.Sprintf(
			"Precondition failed: UID in precondition: %s, UID in object meta: %s", cached.UID, got.UID)}
	}
	want := got
	if want.ResourceVersion == "" {
		want.ResourceVersion = cached.ResourceVersion
	}
	if want.UID == "" {
		want.UID = types.UID(cached.UID)
	}
	if oldMeta, err := wire.ObjectMeta(old); err == nil {
		if !oldMeta.CreationTimestamp.IsZero() {
			want.CreationTimestamp = oldMeta.CreationTimestamp
		}
		want.Generation = oldMeta.Generation
	}
	if want.ResourceVersion == got.ResourceVersion && want.UID == got.UID && want.Generation == got.Generation &&
		want.CreationTimestamp.Equal(&got.CreationTimestamp) {
		return result, nil
	}
	obj, err := wire.Decode(result)
	if err != nil {
		return result, nil
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return result, nil
	}
	m.SetResourceVersion(want.ResourceVersion)
	m.SetUID(want.UID)
	m.SetCreationTimestamp(want.CreationTimestamp)
	m.SetGeneration(want.Generation)
	return wire.Encode(obj, ctOf(result) == wire.MediaProtobuf)
}
