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
// them already.
func keptOnUpdate(result []byte, cached *cache.Header, old []byte) ([]byte, error) {
	obj, err := wire.Decode(result)
	if err != nil {
		return result, nil // refused later, with the name check, or kept as sent (not convertible)
	}
	m, ok := obj.(metav1.Object)
	if !ok {
		return result, nil
	}
	if uid := m.GetUID(); uid != "" && cached.UID != "" && string(uid) != cached.UID {
		return nil, &statusError{code: http.StatusConflict, msg: fmt.Sprintf(
			"Precondition failed: UID in precondition: %s, UID in object meta: %s", cached.UID, uid)}
	}
	changed := false
	if m.GetResourceVersion() == "" && cached.ResourceVersion != "" {
		m.SetResourceVersion(cached.ResourceVersion)
		changed = true
	}
	if m.GetUID() == "" && cached.UID != "" {
		m.SetUID(types.UID(cached.UID))
		changed = true
	}
	if oldMeta, err := wire.ObjectMeta(old); err == nil {
		if !oldMeta.CreationTimestamp.IsZero() && !oldMeta.CreationTimestamp.Equal(ptrTime(m.GetCreationTimestamp())) {
			m.SetCreationTimestamp(oldMeta.CreationTimestamp)
			changed = true
		}
		if m.GetGeneration() != oldMeta.Generation {
			m.SetGeneration(oldMeta.Generation)
			changed = true
		}
	}
	if !changed {
		return result, nil
	}
	return wire.Encode(obj, ctOf(result) == wire.MediaProtobuf)
}

func ptrTime(t metav1.Time) *metav1.Time { return &t }
