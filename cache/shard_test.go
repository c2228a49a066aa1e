package cache

import (
	"net/url"
	"strings"
	"testing"

	"nodehub/wire"
)

// shardQuery is one half of the collection (the apiserver's ShardedListAndWatch, alpha since v1.36).
var shardQuery = "shardSelector=" + url.QueryEscape("shardRange(object.metadata.uid, '0x0', '0x8000000000000000')")

// A list or watch-list of one shard is part of the collection: its objects are kept, but it is
// never recorded as the whole list its other selectors name, and a whole list recorded before
// stays as it was (no object of the other shard deleted by the reconcile).
func TestShardedListIsNeverRecordedAsTheWholeList(t *testing.T) {
	for _, pb := range []bool{false, true} {
		s := openStore(t)
		m := newManager(s)
		a := pod("a", "edge-1", "10", nil)
		b := pod("b", "edge-1", "11", nil)

		// Never listed whole: a sharded LIST and a sharded watch-list record nothing.
		respond(t, m, "GET", "/api/v1/pods?"+shardQuery, "kube-proxy", listBody(t, "100", a))
		w := &watchStream{t: t, pb: pb}
		w.add(wire.EventAdded, a).bookmark("101", true)
		tee(t, m, "/api/v1/pods?"+shardQuery+"&"+watchListQuery, "kube-proxy", pb, w.buf, false)
		if got, res := names(t, s, "kube-proxy", "", "", ""); res.Record != nil {
			t.Fatalf("pb=%v: a shard recorded as the list: %v %+v", pb, got, res.Record)
		}

		// Listed whole, then a shard of it: the whole list stays, b is not deleted.
		respond(t, m, "GET", "/api/v1/pods", "kubelet", listBody(t, "200", a, b))
		respond(t, m, "GET", "/api/v1/pods?"+shardQuery, "kubelet", listBody(t, "300", a))
		w = &watchStream{t: t, pb: pb}
		w.add(wire.EventAdded, a).bookmark("301", true)
		tee(t, m, "/api/v1/pods?"+shardQuery+"&"+watchListQuery, "kubelet", pb, w.buf, false)
		got, res := names(t, s, "kubelet", "", "", "")
		if strings.Join(got, ",") != "a,b" || res.Record == nil || res.Record.ResourceVersion != "200" || strings.Join(res.Record.Keys, ",") != "default/a,default/b" {
			t.Fatalf("pb=%v: after a shard of a whole list: %v %+v", pb, got, res.Record)
		}
	}
}
