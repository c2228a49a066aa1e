package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// brokenCloudRSSBound is the peak RSS (VmHWM) nodehub may reach over the whole broken-cloud
// suite at default flags. What it is made of: the idle hub (~12 MiB), one object or frame held
// whole by a splitter up to wire.MaxObjectBytes (16 MiB) plus the copy handed on, and a filtered
// list read whole up to 32 MiB (hub/serve/filter.go) — the hostile answers below hit each of them, one
// at a time — and the Go heap's headroom over what is live (GOGC=100).
const brokenCloudRSSBound = 128 << 10 // KiB (measured: 91 MiB)

const (
	bcNS          = "brokencloud"
	mediaProtobuf = "application/vnd.kubernetes.protobuf"
)

// A broken cloud (a fake upstream in front of the real apiserver, answering some requests with
// what no apiserver sends): truncated and malformed list items and watch frames, endless items,
// gzip bombs, trickled answers and resets mid-stream. nodehub stays up with its peak RSS under
// brokenCloudRSSBound; a client is never answered 200 with a cut body by a filter; the cache never
// holds or serves a torn object (offline answers are checked after each case).
func TestBrokenCloud(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := cluster.EnsureNamespace(ctx, bcNS); err != nil {
		t.Fatal(err)
	}
	good := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-good", Namespace: bcNS}, Data: map[string]string{"k": "v"}}
	if _, err := cluster.Admin.CoreV1().ConfigMaps(bcNS).Create(ctx, good, metav1.CreateOptions{}); err != nil && !strings.Contains(err.Error(), "exists") {
		t.Fatal(err)
	}
	fc := newFakeCloud(t)
	h := startHubServers(t, fc.URL)
	pid := h.Pid()
	listPath := "/api/v1/namespaces/" + bcNS + "/configmaps"

	// The caches of kubelet (filtered: inclusterconfig reads its configmaps) and coredns
	// (passed through) hold a complete list of the namespace before the cloud breaks.
	for _, ua := range []string{"kubelet", "coredns"} {
		if code, body := hubGet(t, h.ProxyURL, ua, listPath, "", ""); code != 200 || !bytes.Contains(body, []byte("cm-good")) {
			t.Fatalf("%s: good list: %d %.200s", ua, code, body)
		}
	}

	t.Run("endless list item", func(t *testing.T) {
		fc.Tamper(func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != listPath || r.URL.Query().Get("watch") != "" {
				return false
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[{"metadata":{"name":"endless","namespace":"`+bcNS+`","resourceVersion":"99999999"},"data":{"x":"`)
			if err := writeFiller(w, 300<<20); err != nil {
				return true
			}
			io.WriteString(w, `"}}]}`)
			return true
		})
		defer fc.Tamper(nil)
		// kubelet's answer is filtered, so read whole: past the bound it is a 502 Status, sent
		// before any byte of the list.
		code, body := hubGet(t, h.ProxyURL, "kubelet", listPath, "", "")
		if code != http.StatusBadGateway || !bytes.Contains(body, []byte(`"kind":"Status"`)) {
			t.Fatalf("kubelet: %d %.300s", code, body)
		}
		// coredns' answer passes through as the cloud sends it; the cache gives up on the item.
		n, err := hubDrain(h.ProxyURL, "coredns", listPath, "", "")
		t.Logf("coredns read %d MiB of the endless item (%v); nodehub RSS %d MiB", n>>20, err, procStatus(pid, "VmRSS")>>10)
	})
	offlineCheck(t, fc, h, map[string][]string{"kubelet": {listPath, listPath + "/endless"}, "coredns": {listPath, listPath + "/endless"}})

	t.Run("oversized and endless watch frames", func(t *testing.T) {
		fc.Tamper(func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != listPath || r.URL.Query().Get("watch") == "" {
				return false
			}
			if strings.Contains(r.Header.Get("Accept"), mediaProtobuf) {
				w.Header().Set("Content-Type", mediaProtobuf+";stream=watch")
				w.Write(binary.BigEndian.AppendUint32(nil, 1<<30)) // a frame of 1 GiB announced
			} else {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"endless-ev","namespace":"`+bcNS+`","resourceVersion":"99999999"},"data":{"x":"`)
			}
			w.(http.Flusher).Flush()
			writeFiller(w, 100<<20)
			return true
		})
		defer fc.Tamper(nil)
		for _, accept := range []string{"application/json", mediaProtobuf} {
			// kubelet's watch is filtered: it ends with an ERROR event carrying a 502 Status.
			code, body := hubGet(t, h.ProxyURL, "kubelet", listPath+"?watch=1&resourceVersion=0", accept, "")
			if code != 200 || !bytes.Contains(body, []byte("ERROR")) || !bytes.Contains(body, []byte("could not be read")) || len(body) > 1<<20 {
				t.Fatalf("kubelet %s watch: %d, %d bytes: %.300q", accept, code, len(body), body)
			}
			n, err := hubDrain(h.ProxyURL, "coredns", listPath+"?watch=1&resourceVersion=0", accept, "")
			t.Logf("coredns %s watch: read %d MiB (%v)", accept, n>>20, err)
		}
	})
	offlineCheck(t, fc, h, map[string][]string{"kubelet": {listPath, listPath + "/endless-ev"}, "coredns": {listPath, listPath + "/endless-ev"}})

	t.Run("gzip bombs", func(t *testing.T) {
		obj := `{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"bomb","namespace":"` + bcNS + `","resourceVersion":"99999999"},"data":{"x":"`
		bomb := harness.GzipBomb(obj, 70<<20, `"}}`) // ~70 KB compressed, 70 MiB plain
		list := harness.GzipBomb(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[`+strings.TrimPrefix(obj, `{"kind":"ConfigMap","apiVersion":"v1",`), 70<<20, `"}}]}`)
		t.Logf("gzip bombs: %d / %d bytes compressed, 70 MiB plain", len(bomb), len(list))
		fc.Tamper(func(w http.ResponseWriter, r *http.Request) bool {
			var b []byte
			switch {
			case r.URL.Path == listPath+"/bomb":
				b = bomb
			case r.URL.Path == listPath && r.URL.Query().Get("watch") == "":
				b = list
			default:
				return false
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			w.Write(b)
			return true
		})
		defer fc.Tamper(nil)
		for _, path := range []string{listPath + "/bomb", listPath} {
			if code, body := hubGet(t, h.ProxyURL, "kubelet", path, "", "gzip"); code != http.StatusBadGateway || !bytes.Contains(body, []byte(`"kind":"Status"`)) {
				t.Fatalf("kubelet %s: %d %.300s", path, code, body)
			}
			// coredns asked for gzip and gets the cloud's bytes; the cache decompresses within
			// the object bound and gives up.
			if code, body := hubGet(t, h.ProxyURL, "coredns", path, "", "gzip"); code != 200 || len(body) > 1<<20 {
				t.Fatalf("coredns %s: %d, %d bytes", path, code, len(body))
			}
		}
	})
	offlineCheck(t, fc, h, map[string][]string{"kubelet": {listPath, listPath + "/bomb"}, "coredns": {listPath, listPath + "/bomb"}})

	t.Run("truncated and malformed lists", func(t *testing.T) {
		whole := `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[` +
			`{"metadata":{"name":"cut-a","namespace":"` + bcNS + `","resourceVersion":"99999998"},"data":{"k":"v"}},` +
			`{"metadata":{"name":"cut-b","namespace":"` + bcNS + `","resourceVersion":"99999999"},"data":{"k":"` + strings.Repeat("v", 4000) + `"}}]}`
		malformed := `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[` +
			`{"metadata":{"name":"malformed","namespace":"` + bcNS + `","resourceVersion":"99999999"},"data":{"k":tru}}]}`
		mode := ""
		fc.Tamper(func(w http.ResponseWriter, r *http.Request) bool {
			if r.URL.Path != listPath || r.URL.Query().Get("watch") != "" {
				return false
			}
			switch mode {
			case "malformed":
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, malformed)
				return true
			}
			c, rw, err := hijack(w)
			if err != nil {
				panic(http.ErrAbortHandler)
			}
			fmt.Fprintf(rw, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(whole), whole[:len(whole)-2000])
			rw.Flush()
			if mode == "reset" {
				reset(c)
			} else {
				c.Close()
			}
			return true
		})
		defer fc.Tamper(nil)
		for _, mode = range []string{"cut", "reset", "malformed"} {
			for _, ua := range []string{"kubelet", "coredns"} {
				code, body, err := hubGetErr(h.ProxyURL, ua, listPath, "", "")
				switch {
				case mode == "malformed" && err == nil && (code == 200 || code == http.StatusBadGateway):
				case mode != "malformed" && ua == "kubelet" && code == http.StatusBadGateway:
				case mode != "malformed" && ua == "coredns" && err != nil: // the client sees the cut
				default:
					t.Fatalf("%s %s: %d %v %.200s", mode, ua, code, err, body)
				}
			}
		}
	})
	offlineCheck(t, fc, h, map[string][]string{"kubelet": {listPath, listPath + "/malformed"}, "coredns": {listPath, listPath + "/malformed", listPath + "/cut-b"}})

	t.Run("watch reset mid-stream and trickled answers", func(t *testing.T) {
		var trickling atomic.Int32 // trickled answers the cloud has started
		fc.Tamper(func(w http.ResponseWriter, r *http.Request) bool {
			switch {
			case r.URL.Path == listPath && r.URL.Query().Get("watch") != "":
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"ev-whole","namespace":"`+bcNS+`","resourceVersion":"99999990"},"data":{"k":"v"}}}`+"\n")
				io.WriteString(w, `{"type":"MODIFIED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm-good","namespace":"`+bcNS+`","resourceVersion":"99999991"},"data":{"k":"torn`)
				w.(http.Flusher).Flush()
				time.Sleep(100 * time.Millisecond)
				panic(http.ErrAbortHandler) // the stream is reset
			case strings.HasPrefix(r.URL.Path, listPath+"/trickle"):
				trickling.Add(1)
				w.Header().Set("Content-Type", "application/json")
				// A byte every 200 ms for two minutes, unless the client goes first.
				for _, c := range []byte(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"trickle"` + strings.Repeat(" ", 600)) {
					if _, err := w.Write([]byte{c}); err != nil {
						return true
					}
					w.(http.Flusher).Flush()
					select {
					case <-r.Context().Done():
						return true
					case <-time.After(200 * time.Millisecond):
					}
				}
				return true
			}
			return false
		})
		defer fc.Tamper(nil)
		for _, ua := range []string{"kubelet", "coredns"} {
			code, body, _ := hubGetErr(h.ProxyURL, ua, listPath+"?watch=1&resourceVersion=0", "", "")
			if code != 200 || !bytes.Contains(body, []byte("ev-whole")) {
				t.Fatalf("%s: reset watch: %d %.300s", ua, code, body)
			}
		}
		// 30 trickled answers in flight; the node's own requests keep being served meanwhile (not
		// after them: each trickles for two minutes; how fast kubelet is served is no concern of a
		// test on a loaded machine).
		var wg sync.WaitGroup
		var ended atomic.Int32
		tctx, tcancel := context.WithTimeout(ctx, 3*time.Minute)
		defer tcancel()
		for i := 0; i < 30; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer ended.Add(1)
				req, _ := http.NewRequestWithContext(tctx, "GET", h.ProxyURL+listPath+"/trickle-"+strconv.Itoa(i), nil)
				req.Header.Set("User-Agent", "coredns/1")
				if resp, err := http.DefaultClient.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
		eventually(t, 60*time.Second, "30 answers trickling", func() error {
			if n := trickling.Load(); n < 30 {
				return errorf("%d trickling", n)
			}
			return nil
		})
		if code, body := hubGet(t, h.ProxyURL, "kubelet", listPath+"/cm-good", "", ""); code != 200 || !bytes.Contains(body, []byte("cm-good")) {
			t.Fatalf("kubelet during trickles: %d %.200s", code, body)
		}
		if n := ended.Load(); n != 0 {
			t.Fatalf("kubelet's GET was answered after %d of the trickled answers ended", n)
		}
		tcancel()
		wg.Wait()
	})
	offlineCheck(t, fc, h, map[string][]string{"kubelet": {listPath, listPath + "/cm-good", listPath + "/ev-whole"}, "coredns": {listPath, listPath + "/cm-good", listPath + "/trickle-1"}})

	if !h.Running() {
		t.Fatal("nodehub exited")
	}
	peak, now := procStatus(pid, "VmHWM"), procStatus(pid, "VmRSS")
	t.Logf("nodehub over the broken-cloud suite: peak RSS %d MiB (bound %d MiB), RSS at the end %d MiB, %d threads, %d fds",
		peak>>10, brokenCloudRSSBound>>10, now>>10, procStatus(pid, "Threads"), openFDs(pid))
	if peak > brokenCloudRSSBound {
		t.Fatalf("peak RSS %d KiB over the bound %d KiB", peak, brokenCloudRSSBound)
	}
}

// writeFiller writes n bytes of 'x' in 64 KiB pieces, stopping when the reader went away.
func writeFiller(w io.Writer, n int) error {
	piece := bytes.Repeat([]byte{'x'}, 64<<10)
	for i := 0; i < n; i += len(piece) {
		if _, err := w.Write(piece); err != nil {
			return err
		}
	}
	return nil
}

// hubGetErr sends a GET through the hub's proxy port with the node's identity (no credentials,
// loopback) as the component ua, and reads the answer, at most 64 MiB of it.
func hubGetErr(proxy, ua, path, accept, encoding string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := harness.NodeGet(ctx, proxy, ua, path, accept, encoding)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp.StatusCode, body, err
}

func hubGet(t *testing.T, proxy, ua, path, accept, encoding string) (int, []byte) {
	t.Helper()
	code, body, err := hubGetErr(proxy, ua, path, accept, encoding)
	if err != nil {
		t.Fatalf("%s GET %s: %v", ua, path, err)
	}
	return code, body
}

// hubDrain reads an answer through the hub to its end (or 400 MiB), returning the bytes read.
func hubDrain(proxy, ua, path, accept, encoding string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", proxy+path, nil)
	req.Header.Set("User-Agent", ua+"/v1.0")
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return io.Copy(io.Discard, io.LimitReader(resp.Body, 400<<20))
}

// offlineCheck black-holes the fake cloud, waits for nodehub to go offline, and checks that its
// cached answers to each component's paths are whole: a 200 is valid JSON, and a list holds
// only whole objects (and none of the hostile ones, whose names start with the tested path's
// last element or are named in torn); other answers are Status errors. Then the cloud returns.
func offlineCheck(t *testing.T, fc *harness.FakeCloud, h *harness.Hub, paths map[string][]string) {
	t.Helper()
	proxy := h.ProxyURL
	fc.SetDown(true)
	eventually(t, 30*time.Second, "nodehub offline", func() error {
		hubGetErr(proxy, "kubelet", "/api/v1/namespaces/"+bcNS+"/configmaps/cm-good", "", "") // a read notices the black hole
		if v := serverHealthy(h); v != 0 {
			return fmt.Errorf("server healthy %v", v)
		}
		return nil
	})
	for ua, ps := range paths {
		for _, p := range ps {
			code, body, err := hubGetErr(proxy, ua, p, "", "")
			if err != nil {
				t.Fatalf("offline %s %s: %v", ua, p, err)
			}
			if !json.Valid(body) {
				t.Fatalf("offline %s %s: %d and a body that is not JSON: %.200q", ua, p, code, body)
			}
			var obj struct {
				Kind  string            `json:"kind"`
				Items []json.RawMessage `json:"items"`
			}
			json.Unmarshal(body, &obj)
			switch {
			case code == 200 && strings.HasSuffix(obj.Kind, "List"):
				for _, it := range obj.Items {
					var m struct {
						Metadata metav1.ObjectMeta `json:"metadata"`
						Data     map[string]string `json:"data"`
					}
					if err := json.Unmarshal(it, &m); err != nil {
						t.Fatalf("offline %s %s: an item does not decode: %v", ua, p, err)
					}
					if m.Metadata.Name != "cm-good" && m.Metadata.Name != "ev-whole" && !strings.HasPrefix(m.Metadata.Name, "cut-a") {
						t.Fatalf("offline %s %s: holds %q", ua, p, m.Metadata.Name)
					}
					if m.Data["k"] != "v" {
						t.Fatalf("offline %s %s: %q holds %q", ua, p, m.Metadata.Name, m.Data)
					}
				}
			case code == 200:
				var m struct {
					Metadata metav1.ObjectMeta `json:"metadata"`
					Data     map[string]string `json:"data"`
				}
				json.Unmarshal(body, &m)
				if (m.Metadata.Name != "cm-good" && m.Metadata.Name != "ev-whole") || m.Data["k"] != "v" {
					t.Fatalf("offline %s %s: 200 with %q %q", ua, p, m.Metadata.Name, m.Data)
				}
			case obj.Kind != "Status":
				t.Fatalf("offline %s %s: %d %.200s", ua, p, code, body)
			}
			t.Logf("offline %s %s: %d (%d items)", ua, p, code, len(obj.Items))
		}
	}
	fc.SetDown(false)
	eventually(t, 30*time.Second, "nodehub online", func() error {
		if v := serverHealthy(h); v != 1 {
			return fmt.Errorf("server healthy %v", v)
		}
		return nil
	})
}

// serverHealthy is nodehub_server_healthy of the hub's one server (-1 unknown).
func serverHealthy(h *harness.Hub) float64 {
	_, body, err := h.Get("/metrics")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "nodehub_server_healthy{") {
			f := strings.Fields(l)
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			return v
		}
	}
	return -1
}
