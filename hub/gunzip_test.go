package hub

import (
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"nodehub/wire"
)

// Since v1.35 the apiserver gzips a watch-list's answer for a client that accepts gzip (client-go
// does by default). The hub hands the node's client the events plain, as they arrive, and keeps
// them as the list they are: offline the watch-list and its LIST are answered.
func TestProxyGzipWatchListIsPlainKeptAndAnsweredOffline(t *testing.T) {
	for _, pb := range []bool{false, true} {
		name := "json"
		if pb {
			name = "protobuf"
		}
		t.Run(name, func(t *testing.T) {
			f := newProxyFixture(t, nil)
			ca := rootCA(t, pb)
			stream := initialEvents(pb, "v1", "ConfigMap", "11", ca)
			gzipped := make(chan bool, 1)
			f.cloud.mu.Lock()
			f.cloud.handle = func(w http.ResponseWriter, r *http.Request) bool {
				if r.URL.Path != "/api/v1/namespaces/default/configmaps" || r.URL.Query().Get("sendInitialEvents") != "true" {
					return false
				}
				w.Header().Set("Content-Type", watchCT(pb))
				if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
					gzipped <- false
					w.WriteHeader(http.StatusOK)
					_, _ = w.Write(stream)
					w.(http.Flusher).Flush()
					<-r.Context().Done()
					return true
				}
				gzipped <- true
				w.Header().Set("Content-Encoding", "gzip")
				w.Header().Set("Vary", "Accept-Encoding")
				w.WriteHeader(http.StatusOK)
				zw := gzip.NewWriter(w)
				_, _ = zw.Write(stream)
				_ = zw.Flush() // the stream stays open: only a flush, as the apiserver's watch does
				w.(http.Flusher).Flush()
				<-r.Context().Done()
				return true
			}
			f.cloud.mu.Unlock()
			path := "/api/v1/namespaces/default/configmaps?fieldSelector=metadata.name%3Dkube-root-ca.crt&" + wlQuery

			// Online, as client-go asks: gzip accepted. The events arrive plain while the watch is open.
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.url+path, nil)
			req.Header.Set("User-Agent", kubelet)
			req.Header.Set("Accept-Encoding", "gzip") // set by hand: the client's transport does not decompress
			if pb {
				req.Header.Set("Accept", wire.MediaProtobuf+", "+wire.MediaJSON)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if !<-gzipped {
				t.Fatal("the cloud was not asked for gzip: the uplink would carry the events uncompressed")
			}
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" {
				t.Fatalf("online: %d, Content-Encoding %q", resp.StatusCode, resp.Header.Get("Content-Encoding"))
			}
			got := make([]byte, len(stream))
			if _, err := io.ReadFull(resp.Body, got); err != nil || string(got) != string(stream) {
				t.Fatalf("online: the events read %q (%v), want the cloud's events plain", got, err)
			}
			resp.Body.Close()
			cancel()

			if err := f.hub.cache.Writer.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			f.offline(t)
			f.cloud.took()
			a := f.watchUntilListed(t, path, kubelet, "", pb)
			if names, rv := a.added(t); a.code != http.StatusOK || strings.Join(names, ",") != "kube-root-ca.crt" || rv != "11" {
				t.Fatalf("offline watch-list: %d %v up to rv %q %s", a.code, names, rv, a.body)
			}
			list := f.do(t, http.MethodGet, strings.SplitN(path, "watch=1", 2)[0], kubelet, "", "")
			if names, rv := listed(t, list); list.code != http.StatusOK || strings.Join(names, ",") != "kube-root-ca.crt" || rv != "11" {
				t.Fatalf("offline list: %d %v at rv %q", list.code, names, rv)
			}
		})
	}
}
