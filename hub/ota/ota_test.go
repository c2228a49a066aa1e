package ota

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func podJSON(node string, conds ...condition) *pod {
	p := &pod{}
	p.Metadata.Name, p.Metadata.Namespace = "agent-x", "default"
	p.Spec.NodeName = node
	p.Status.Conditions = conds
	return p
}

func TestChecks(t *testing.T) {
	need := condition{Type: CondNeedUpgrade, Status: "True", Message: VersionPrefix + "h2"}
	ts := "2026-01-01T00:00:00Z"
	for _, tc := range []struct {
		name      string
		p         *pod
		statusOK  bool
		imageOK   bool
		nextRev   string
		deleting  bool
		otherNode bool
	}{
		{name: "no condition", p: podJSON("edge-1"), statusOK: false, imageOK: true},
		{name: "need upgrade", p: podJSON("edge-1", need), statusOK: true, imageOK: true, nextRev: "h2"},
		{name: "need upgrade false", p: podJSON("edge-1", condition{Type: CondNeedUpgrade, Status: "False"}), statusOK: false, imageOK: true},
		{name: "other node", p: podJSON("edge-2", need), statusOK: false, imageOK: true, nextRev: "h2"},
		{name: "image pulling", p: podJSON("edge-1", need, condition{Type: CondImageReady, Status: "False", Message: VersionPrefix + "h2"}), statusOK: true, imageOK: false, nextRev: "h2"},
		{name: "image ready", p: podJSON("edge-1", need, condition{Type: CondImageReady, Status: "True", Message: VersionPrefix + "h2"}), statusOK: true, imageOK: true, nextRev: "h2"},
		{name: "image ready for an older revision", p: podJSON("edge-1", need, condition{Type: CondImageReady, Status: "True", Message: VersionPrefix + "h1"}), statusOK: true, imageOK: false, nextRev: "h2"},
	} {
		if err := tc.p.checkStatus("edge-1"); (err == nil) != tc.statusOK {
			t.Errorf("%s: checkStatus = %v", tc.name, err)
		}
		if err := tc.p.checkImageReady(); (err == nil) != tc.imageOK {
			t.Errorf("%s: checkImageReady = %v", tc.name, err)
		}
		if got := tc.p.nextRevision(); got != tc.nextRev {
			t.Errorf("%s: nextRevision %q, want %q", tc.name, got, tc.nextRev)
		}
	}
	p := podJSON("edge-1", need)
	p.Metadata.DeletionTimestamp = &ts
	if p.checkStatus("edge-1") == nil {
		t.Error("a pod being deleted passed the check")
	}
}

func TestNames(t *testing.T) {
	for in, want := range map[string]string{"kube-proxy-edge-1": "kube-proxy", "edge-1": "", "x-edge-2": "", "a-b-edge-1": "a-b"} {
		if got := staticName(in, "edge-1"); got != want {
			t.Errorf("staticName(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]bool{"default": true, "a.b-c": true, "": false, "..": false, "a/b": false, "A": false, "a%2f": false, "a?b": false} {
		if isDNSName(in) != want {
			t.Errorf("isDNSName(%q) != %v", in, want)
		}
	}
}

func TestWriteManifestKeepsTheOldOneAndLeavesNoTemp(t *testing.T) {
	dir := t.TempDir()
	if err := writeManifest(dir, "a.yaml", []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := writeManifest(dir, "a.yaml", []byte("two")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a.yaml")); string(b) != "two" {
		t.Fatalf("manifest %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, ".a.yaml.bak")); string(b) != "one" {
		t.Fatalf("backup %q", b)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("files %v, want the manifest and its backup", entries)
	}
}

// TestAnswersAreStatuses checks the answers a script acts on without a cloud: a bad name, the
// cloud unreachable, a client that is not on the node.
func TestAnswersAreStatuses(t *testing.T) {
	online := false
	h := &Handler{NodeName: "edge-1", Online: func() bool { return online },
		FromNode:   func(r *http.Request) bool { return strings.HasPrefix(r.RemoteAddr, "127.0.0.1:") },
		Cloud:      http.DefaultTransport,
		CachedPods: func(func([]byte) error) error { return nil }}
	mux := http.NewServeMux()
	h.Register(mux)
	do := func(path, remote string) (int, map[string]any) {
		req := httptest.NewRequest(http.MethodPost, path, nil)
		req.RemoteAddr = remote
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)
		var st map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil || st["kind"] != "Status" {
			t.Fatalf("%s: %d %q is not a Status", path, w.Code, w.Body.String())
		}
		return w.Code, st
	}
	if code, st := do("/openyurt.io/v1/namespaces/default/pods/x/upgrade", "127.0.0.1:5000"); code != 503 || st["code"].(float64) != 503 {
		t.Errorf("offline upgrade: %d %v", code, st)
	}
	if code, _ := do("/openyurt.io/v1/namespaces/default/pods/x/imagepull", "127.0.0.1:5000"); code != 503 {
		t.Errorf("offline imagepull: %d", code)
	}
	online = true
	if code, _ := do("/openyurt.io/v1/namespaces/default/pods/X_Y/upgrade", "127.0.0.1:5000"); code != 400 {
		t.Errorf("bad name: %d", code)
	}
	if code, _ := do("/openyurt.io/v1/namespaces/default/pods/x/upgrade", "10.0.0.9:5000"); code != 403 {
		t.Errorf("from another host: %d", code)
	}
}

// BenchmarkPods measures GET /pods for a node with 110 pods of ~4 KB (kubelet's usual maximum).
func BenchmarkPods(b *testing.B) {
	pods := make([][]byte, 110)
	for i := range pods {
		pods[i] = []byte(fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p%d","namespace":"default"},"spec":{"nodeName":"edge-1","containers":[{"name":"c","image":"i","env":[{"name":"X","value":%q}]}]}}`, i, strings.Repeat("v", 4000)))
	}
	h := &Handler{NodeName: "edge-1", CachedPods: func(fn func([]byte) error) error {
		for _, p := range pods {
			if err := fn(p); err != nil {
				return err
			}
		}
		return nil
	}}
	mux := http.NewServeMux()
	h.Register(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		resp, err := http.Get(srv.URL + "/pods")
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || n < 110*4000 {
			b.Fatalf("%d, %d bytes", resp.StatusCode, n)
		}
	}
}
