package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"nodehub/e2e/harness"
)

// benchHostile measures the hub's peak memory (VmHWM) at default flags under what hostile pods
// send: 100 GETs with 1 MB User-Agents, 200 with 18 KB odd ones, 300 distinct components; then,
// offline, 360 creates of 1 MiB events with 30 made-up tokens (refused: the cloud never accepted
// them), 20 creates of 3 MiB events with a ServiceAccount's token the cloud accepted, and 8
// concurrent lists of them (4 JSON, 4 protobuf). The e2e suite "Hostile clients" asserts the bound
// on the same workload.
func benchHostile(e *env, o options) error {
	benchHostileResync() // the start after a torn write inside objects of frame heads (hostileresync.go)
	relay, dir, err := e.relay()
	if err != nil {
		return err
	}
	defer relay.Refuse()
	h, err := e.c.StartHub(e.ctx, harness.HubOptions{Bin: e.bin, Dir: dir, Servers: relay.URL(), Args: []string{"--v=2", "--heartbeat-timeout-seconds=1"}})
	if err != nil {
		return err
	}
	defer h.Stop()
	if err := h.WaitHTTP(e.ctx, "/v1/readyz", 20*time.Second); err != nil {
		return err
	}
	hwm := func() float64 {
		v, _ := procStatusKiB(h.Pid(), "VmHWM")
		return float64(v) / 1024
	}
	cl := &http.Client{Timeout: 60 * time.Second}
	defer cl.CloseIdleConnections()
	do := func(method, url, body string, hdr map[string]string) (int, int64) {
		req, _ := http.NewRequestWithContext(e.ctx, method, url, strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := cl.Do(req)
		if err != nil {
			return 0, 0
		}
		defer resp.Body.Close()
		n, _ := io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, n
	}
	pods := h.ProxyURL + "/api/v1/pods?fieldSelector=spec.nodeName%3D" + harness.NodeName
	start := hwm()
	for i := 0; i < 100; i++ {
		do(http.MethodGet, pods, "", map[string]string{"User-Agent": fmt.Sprintf("%03d", i) + strings.Repeat("x", 1<<20)})
	}
	for i := 0; i < 200; i++ {
		do(http.MethodGet, h.ProxyURL+"/version", "", map[string]string{"User-Agent": fmt.Sprintf("%03d", i) + strings.Repeat("\xff{\"}\\é", 3000) + "/1.0"})
	}
	for i := 0; i < 300; i++ {
		do(http.MethodGet, pods+"&limit=5", "", map[string]string{"User-Agent": fmt.Sprintf("owner-%d/1.0", i)})
	}
	_, metricsBytes := do(http.MethodGet, h.HubURL+"/metrics", "", nil)
	token, err := benchServiceAccount(e.ctx, e.c)
	if err != nil {
		return err
	}
	flood := map[string]string{"Authorization": "Bearer " + token, "User-Agent": "flooder/1.0", "Content-Type": "application/json"}
	if code, _ := do(http.MethodGet, h.ProxyURL+"/api/v1/namespaces/default/configmaps", "", flood); code != http.StatusOK {
		return fmt.Errorf("hostile: the ServiceAccount's list through the hub: %d", code)
	}
	online := hwm()

	relay.Refuse()
	for deadline := time.Now().Add(20 * time.Second); ; {
		if v, _ := h.Metric(`nodehub_server_healthy{server="` + relay.Addr + `"}`); v == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hostile: the hub did not go offline")
		}
		time.Sleep(100 * time.Millisecond)
	}
	oneMiB := strings.Repeat("f", 1<<20)
	refused := 0
	for o := 0; o < 30; o++ {
		for i := 0; i < 12; i++ {
			ev := fmt.Sprintf(`{"apiVersion":"v1","kind":"Event","metadata":{"name":"forged-%d-%d","namespace":"default"},"involvedObject":{"kind":"Pod","name":"x","namespace":"default"},"reason":"Flood","message":"%d%s"}`, o, i, i, oneMiB)
			if code, _ := do(http.MethodPost, h.ProxyURL+"/api/v1/namespaces/default/events", ev,
				map[string]string{"Authorization": fmt.Sprintf("Bearer forged-%d", o), "User-Agent": fmt.Sprintf("owner-%d/1.0", o), "Content-Type": "application/json"}); code != http.StatusCreated {
				refused++
			}
		}
	}
	forged := hwm()
	big := strings.Repeat("m", 3<<20-1024)
	created := 0
	for i := 0; i < 20; i++ {
		ev := fmt.Sprintf(`{"apiVersion":"v1","kind":"Event","metadata":{"name":"flood-%d","namespace":"default"},"involvedObject":{"kind":"Pod","name":"x","namespace":"default"},"reason":"Flood","message":"%s"}`, i, big)
		if code, _ := do(http.MethodPost, h.ProxyURL+"/api/v1/namespaces/default/events", ev, flood); code == http.StatusCreated {
			created++
		}
	}
	creates := hwm()
	var wg sync.WaitGroup
	var listed atomic.Int64
	t0 := time.Now()
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			hdr := map[string]string{"Accept": "application/json"}
			if i%2 == 1 {
				hdr["Accept"] = "application/vnd.kubernetes.protobuf"
			}
			for k, v := range flood {
				hdr[k] = v
			}
			_, n := do(http.MethodGet, h.ProxyURL+"/api/v1/namespaces/default/events", "", hdr)
			listed.Add(n)
		}()
	}
	wg.Wait()
	lists := hwm()
	fmt.Printf("\n## hostile clients, default flags (VmHWM, the peak resident set)\n")
	fmt.Println("phase\tVmHWM")
	fmt.Printf("started\t%.1f MiB\n", start)
	fmt.Printf("100 GETs with 1 MB User-Agents (431), 200 with 18 KB odd ones, 300 components (/metrics %d bytes)\t%.1f MiB\n", metricsBytes, online)
	fmt.Printf("offline: 360 creates of 1 MiB events with 30 made-up tokens (%d refused)\t%.1f MiB\n", refused, forged)
	fmt.Printf("offline: %d creates of 3 MiB events with an accepted token\t%.1f MiB\n", created, creates)
	fmt.Printf("offline: 8 concurrent lists of them (4 JSON, 4 protobuf; %.0f MiB sent in %v)\t%.1f MiB\n", float64(listed.Load())/(1<<20), time.Since(t0).Round(time.Millisecond), lists)
	benchHostileFlash(h, do, flood)
	return nil
}
