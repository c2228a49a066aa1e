package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"nodehub/e2e/harness"
)

// benchBrokenCloud measures nodehub's peak RSS (VmHWM) while a broken cloud — a fake upstream in
// front of the real apiserver — sends one hostile answer: a fresh hub at default flags for each,
// so each peak is that answer's alone.
func benchBrokenCloud(e *env, o options) error {
	fc, err := e.c.NewFakeCloud()
	if err != nil {
		return err
	}
	defer fc.Close()
	const list = "/api/v1/namespaces/default/configmaps"
	item := `{"metadata":{"name":"big","namespace":"default","resourceVersion":"99999999"},"data":{"x":"`
	endlessList := func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != list || r.URL.Query().Get("watch") != "" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[`+item)
		filler(w, 300<<20)
		io.WriteString(w, `"}}]}`)
		return true
	}
	endlessFrame := func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != list || r.URL.Query().Get("watch") == "" {
			return false
		}
		if strings.Contains(r.Header.Get("Accept"), "protobuf") {
			w.Header().Set("Content-Type", "application/vnd.kubernetes.protobuf;stream=watch")
			w.Write(binary.BigEndian.AppendUint32(nil, 1<<30))
		} else {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1",`+item[1:])
		}
		filler(w, 100<<20)
		return true
	}
	bombObj := harness.GzipBomb(`{"kind":"ConfigMap","apiVersion":"v1",`+item[1:], 70<<20, `"}}`)
	bombList := harness.GzipBomb(`{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"1"},"items":[`+item, 70<<20, `"}}]}`)
	gz := func(b []byte) func(w http.ResponseWriter, r *http.Request) bool {
		return func(w http.ResponseWriter, r *http.Request) bool {
			if !strings.HasPrefix(r.URL.Path, list) || r.URL.Query().Get("watch") != "" {
				return false
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Length", strconv.Itoa(len(b)))
			w.Write(b)
			return true
		}
	}
	fmt.Printf("\nbroken cloud: peak RSS (VmHWM) of a fresh hub (default flags) through one hostile answer of a fake upstream\n")
	for _, ph := range []struct {
		what, ua, path, accept, enc string
		tamper                      func(w http.ResponseWriter, r *http.Request) bool
	}{
		{"none: one good list of the namespace's ConfigMaps (baseline)", "kubelet", list, "", "", nil},
		{"an endless list item (300 MiB), to kubelet (filtered: 502 at 32 MiB)", "kubelet", list, "", "", endlessList},
		{"an endless list item (300 MiB), to coredns (passed through; the cache gives up at 16 MiB)", "coredns", list, "", "", endlessList},
		{"an endless JSON watch frame (100 MiB), to kubelet (filtered: ERROR event at 16 MiB)", "kubelet", list + "?watch=1", "application/json", "", endlessFrame},
		{"a protobuf watch frame announcing 1 GiB (then 100 MiB), to coredns (passed through)", "coredns", list + "?watch=1", "application/vnd.kubernetes.protobuf", "", endlessFrame},
		{"a gzip bomb get (" + strconv.Itoa(len(bombObj)>>10) + " KiB → 70 MiB), to kubelet (filtered: 502 at 16 MiB)", "kubelet", list + "/big", "", "gzip", gz(bombObj)},
		{"a gzip bomb list (" + strconv.Itoa(len(bombList)>>10) + " KiB → 70 MiB), to coredns (the cache decompresses it: gives up at 16 MiB)", "coredns", list, "", "gzip", gz(bombList)},
	} {
		dir, err := e.hubDir()
		if err != nil {
			return err
		}
		h, err := e.c.StartHub(e.ctx, harness.HubOptions{Bin: e.bin, Dir: dir, Servers: fc.URL, Args: []string{"--v=2"}})
		if err != nil {
			return err
		}
		if err := h.WaitHTTP(e.ctx, "/v1/readyz", 20*time.Second); err != nil {
			h.Stop()
			return err
		}
		fc.Tamper(ph.tamper)
		code, n, err := drain(h.ProxyURL, ph.ua, ph.path, ph.accept, ph.enc)
		fc.Tamper(nil)
		time.Sleep(time.Second) // the cache's writer finishes with it
		peak, _ := procStatusKiB(h.Pid(), "VmHWM")
		now, _ := procStatusKiB(h.Pid(), "VmRSS")
		alive := h.Running()
		h.Stop()
		fmt.Printf("  %-100s peak %5.1f MiB, after %5.1f MiB (client: %d, %d MiB read%s; hub up: %v)\n",
			ph.what, float64(peak)/1024, float64(now)/1024, code, n>>20, errNote(err), alive)
	}
	return nil
}

func errNote(err error) string {
	if err != nil {
		return ", " + err.Error()
	}
	return ""
}

func filler(w io.Writer, n int) {
	piece := bytes.Repeat([]byte{'x'}, 64<<10)
	for i := 0; i < n; i += len(piece) {
		if _, err := w.Write(piece); err != nil {
			return
		}
	}
}

// drain sends a GET through the hub's proxy port with the node's identity as component ua and
// reads the answer to its end (at most 400 MiB).
func drain(proxy, ua, path, accept, enc string) (int, int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := harness.NodeGet(ctx, proxy, ua, path, accept, enc)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 400<<20))
	return resp.StatusCode, n, err
}
