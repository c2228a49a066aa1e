package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"

	"nodehub/e2e/harness"
)

// benchOffline measures the offline proxy: LIST latency of the node's pods from the cache
// (protobuf as kubelet asks, and JSON, which is converted), the latency of kubelet's watch-list of
// them (client-go ≥ 1.35 lists so) to its initial-events-end bookmark, the time from exec of a hub started
// offline to its first cached answer, and the time from a black-holed cloud to the first cached
// answer with default flags.
func benchOffline(e *env, o options) error {
	relay, dir, err := e.relay()
	if err != nil {
		return err
	}
	defer relay.Refuse()
	start := func(noWait bool) (*harness.Hub, error) {
		h, err := e.c.StartHub(e.ctx, harness.HubOptions{Bin: e.bin, Dir: dir, Servers: relay.URL(), NoWait: noWait,
			Args: []string{"--v=2", "--heartbeat-interval-seconds=10", "--heartbeat-timeout-seconds=2", "--cache-agents=kubelet,json-agent"}})
		return h, err
	}
	h, err := start(false)
	if err != nil {
		return err
	}
	list := "/api/v1/pods?fieldSelector=spec.nodeName%3D" + harness.NodeName
	cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}, Timeout: 30 * time.Second}
	wcl := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} // a watch holds its connection; leaving one closes it
	if _, err := timeGetAs(cl, h.ProxyURL+list, "application/vnd.kubernetes.protobuf"); err != nil {
		return err
	}
	if _, err := timeGetAsUA(cl, h.ProxyURL+list, "application/json", "json-agent/1"); err != nil {
		return err
	}
	// kubelet ≥ 1.35 lists by watch-list: one through the hub online, kept as the list.
	watchList := list + "&watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=300"
	_, onNode, err := timeWatchList(wcl, h.ProxyURL+watchList, "application/vnd.kubernetes.protobuf,application/json", kubeletUA)
	if err != nil {
		return fmt.Errorf("online watch-list: %w", err)
	}
	settle(h)

	// A black-holed cloud, default flags: how long until the first cached answer.
	if err := relay.BlackHole(); err != nil {
		return err
	}
	t0 := time.Now()
	if _, err := timeGetAs(cl, h.ProxyURL+list, "application/vnd.kubernetes.protobuf"); err != nil {
		return err
	}
	blackHole := time.Since(t0)
	relay.Refuse()

	fmt.Printf("\n## offline, %d pods on the node, cache filled by a kubelet-like protobuf client\n", o.pods)
	fmt.Printf("black_hole_to_first_cached_answer\t%v\t(--heartbeat-timeout-seconds=2)\n", blackHole.Round(time.Millisecond))
	fmt.Println("request\tmedian\tp99")
	direct, err := directClient(e.c)
	if err != nil {
		return err
	}
	var dds []time.Duration // the online direct LIST, interleaved with the offline protobuf one
	for qi, q := range []struct{ name, media, ua string }{
		{"protobuf, as cached", "application/vnd.kubernetes.protobuf", kubeletUA},
		{"JSON, as cached by a JSON client", "application/json", "json-agent/1"},
		{"JSON, converted from kubelet's protobuf", "application/json", kubeletUA},
	} {
		var ds []time.Duration
		for i := 0; i < 520; i++ {
			d, err := timeGetAsUA(cl, h.ProxyURL+list, q.media, q.ua)
			if err != nil {
				return err
			}
			if i >= 20 {
				ds = append(ds, d)
			}
			if qi == 0 {
				dd, err := timeGetAsUA(direct, e.c.APIServers[0].URL+list, q.media, q.ua)
				if err != nil {
					return err
				}
				if i >= 20 {
					dds = append(dds, dd)
				}
			}
		}
		fmt.Printf("offline LIST pods (%s)\t%v\t%v\n", q.name, pct(ds, 50), pct(ds, 99))
		if qi == 0 {
			fmt.Printf("online direct LIST pods (protobuf, interleaved with the one above)\t%v\t%v\n", pct(dds, 50), pct(dds, 99))
			fmt.Printf("offline_over_direct_LIST_pods_protobuf\tp50 %.2f×\tp99 %.2f×\n", float64(pct(ds, 50))/float64(pct(dds, 50)), float64(pct(ds, 99))/float64(pct(dds, 99)))
		}
	}
	// kubelet's watch-list of its pods, protobuf: from the request to the initial-events-end
	// bookmark (every pod as ADDED before it), on a connection of its own as a watch has.
	var ds []time.Duration
	for i := 0; i < 520; i++ {
		d, n, err := timeWatchList(wcl, h.ProxyURL+watchList, "application/vnd.kubernetes.protobuf,application/json", kubeletUA)
		if err != nil {
			return err
		}
		if n != onNode {
			return fmt.Errorf("offline watch-list: %d pods, online %d", n, onNode)
		}
		if i >= 20 {
			ds = append(ds, d)
		}
	}
	fmt.Printf("offline watch-list of %d pods (protobuf, kubelet's, to the initial-events-end bookmark)\t%v\t%v\n", onNode, pct(ds, 50), pct(ds, 99))
	h.Stop()

	// A hub started while the cloud is unreachable answers from the cache at once.
	t1 := time.Now()
	h2, err := start(true)
	if err != nil {
		return err
	}
	defer h2.Stop()
	var first time.Duration
	for time.Since(t1) < 30*time.Second {
		if _, err := timeGetAs(&http.Client{Timeout: time.Second}, h2.ProxyURL+list, "application/vnd.kubernetes.protobuf"); err == nil {
			first = time.Since(t1)
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	if first == 0 {
		return fmt.Errorf("restarted offline hub never answered")
	}
	fmt.Printf("exec_to_first_offline_answer\t%v\n", first.Round(time.Millisecond))
	return nil
}

// initialEventsEnd is the annotation of the bookmark that ends a watch-list's initial events.
var initialEventsEnd = []byte("k8s.io/initial-events-end")

// timeWatchList sends a watch-list and reads it up to the initial-events-end bookmark (found in
// the stream's bytes, JSON or protobuf), then leaves; it returns the time that took and the ADDED
// events before it.
func timeWatchList(cl *http.Client, url, accept, ua string) (time.Duration, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	req.Header.Set("Accept", accept)
	req.Header.Set("User-Agent", ua)
	start := time.Now()
	resp, err := cl.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("%s: %s", url, resp.Status)
	}
	var got []byte
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		from := max(0, len(got)-len(initialEventsEnd))
		got = append(got, buf[:n]...)
		if bytes.Contains(got[from:], initialEventsEnd) {
			return time.Since(start), bytes.Count(got, []byte("ADDED")), nil
		}
		if err != nil {
			return 0, 0, fmt.Errorf("%s: ended before its initial-events-end bookmark: %v", url, err)
		}
	}
}
