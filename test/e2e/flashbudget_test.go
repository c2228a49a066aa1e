package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// Issue 28: offline, one pod re-creating one 2.9 MB event for 30 s wrote 686 MiB (184 creates,
// all 201). With a ServiceAccount's token the real apiserver accepted, the pod's offline creates
// are held to the write budget: the 2.9 MB event is larger than its bucket holds (403, final), a
// 100 KiB one is written until the budget is spent and then gets 429 with Retry-After; the cache
// writes at most 2 MiB for all of it, and kubelet's own events are still kept.
func TestOfflinePodFloodIsHeldToTheFlashBudget(t *testing.T) {
	const ns = "flash"
	relay, err := harness.NewRelay(strings.TrimPrefix(cluster.APIServers[0].URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Refuse()
	h := startHubServers(t, relay.URL(), "--heartbeat-timeout-seconds=1")
	token := saSetup(t, ns, "pod-a")["pod-a"]
	cl := &http.Client{Timeout: 20 * time.Second}
	defer cl.CloseIdleConnections()
	pod := map[string]string{"Authorization": "Bearer " + token, "User-Agent": "flooder/1.0", "Content-Type": "application/json"}
	if code, b := raw(t, cl, http.MethodGet, h.ProxyURL+"/api/v1/namespaces/"+ns+"/configmaps", nil, pod); code != http.StatusOK {
		t.Fatalf("pod-a's list online (the cloud accepts its token): %d %s", code, b)
	}
	relay.Refuse()
	eventually(t, 20*time.Second, "hub offline", func() error {
		if v, _ := h.Metric(`nodehub_server_healthy{server="` + relay.Addr + `"}`); v != 0 {
			return errorf("server healthy %v", v)
		}
		return nil
	})
	written := func() float64 {
		a, _ := h.Metric("nodehub_cache_written_bytes_total")
		c, _ := h.Metric("nodehub_cache_compaction_written_bytes_total")
		return a + c
	}
	events := h.ProxyURL + "/api/v1/namespaces/" + ns + "/events"
	event := func(name string, n int) string {
		b := make([]byte, n/2)
		_, _ = rand.Read(b)
		return fmt.Sprintf(`{"apiVersion":"v1","kind":"Event","metadata":{"name":%q,"namespace":%q},"involvedObject":{"kind":"Pod","name":"x","namespace":%q},"reason":"Wear","message":%q}`, name, ns, ns, hex.EncodeToString(b))
	}
	w0 := written()
	big := event("big", 2_900_000)
	for i := 0; i < 20; i++ {
		if code, b := raw(t, cl, http.MethodPost, events, strings.NewReader(big), pod); code != http.StatusForbidden {
			t.Fatalf("offline create %d of a pod's 2.9 MB event: %d %.300s, want 403", i, code, b)
		}
	}
	codes := map[int]int{}
	for i := 0; i < 20; i++ {
		code, retry, b := postForRetryAfter(t, cl, events, event("mid", 100<<10), pod)
		codes[code]++
		var st metav1.Status
		if code == http.StatusTooManyRequests && (retry < 1 || json.Unmarshal(b, &st) != nil || st.Details == nil || int(st.Details.RetryAfterSeconds) != retry) {
			t.Fatalf("offline create past the budget: 429 with Retry-After %d, %s", retry, b)
		}
		if code != http.StatusCreated && code != http.StatusTooManyRequests {
			t.Fatalf("offline create of a pod's 100 KiB event: %d %.300s", code, b)
		}
	}
	if w := written() - w0; codes[http.StatusCreated] == 0 || codes[http.StatusTooManyRequests] == 0 || w > 2<<20 {
		t.Fatalf("a pod's 40 offline creates: answers %v, %.0f bytes written to the cache", codes, w)
	}
	t.Logf("a pod's 20 offline creates of a 2.9 MB event (403) and 20 of a 100 KiB one %v: %.0f bytes written", codes, written()-w0)
	kubelet := map[string]string{"User-Agent": "kubelet/v1.34.0", "Content-Type": "application/json"}
	if code, b := raw(t, cl, http.MethodPost, events, strings.NewReader(event("kubelet-ev", 1<<10)), kubelet); code != http.StatusCreated {
		t.Fatalf("kubelet's offline event after the pod's flood: %d %.300s", code, b)
	}
}

// postForRetryAfter posts body and returns the code, the Retry-After seconds (0 without) and the body.
func postForRetryAfter(t *testing.T, cl *http.Client, url, body string, hdr map[string]string) (int, int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return resp.StatusCode, retry, b
}
