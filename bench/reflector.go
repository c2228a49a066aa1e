package main

import (
	"context"
	"encoding/json"
	"net/http"
	"sync/atomic"
	"time"
)

// benchReflector is a kube-proxy-like client as client-go's reflector is: it lists, then watches
// from the list's resourceVersion with bookmarks, resumes a watch that ended from the last
// resourceVersion it saw, and lists again only after a 410 (issue 29: the return's relists). It
// remembers the last bench mark it saw (the label bench-mark on an object) and counts its lists
// and the watches that ended in 410.
type benchReflector struct {
	mark  atomic.Value // string
	lists atomic.Int64
	gone  atomic.Int64
}

// benchEvent is what the reflector reads of a list item or a watch event.
type benchEvent struct {
	Type   string
	Object struct {
		Metadata struct {
			ResourceVersion string
			Labels          map[string]string
		}
		Code   int
		Reason string
	}
}

func (r *benchReflector) run(ctx context.Context, url, ua string) {
	rv := ""
	for ctx.Err() == nil {
		var ok bool
		if rv == "" {
			rv, ok = r.list(ctx, url, ua)
		} else {
			rv, ok = r.watch(ctx, url+"?watch=true&allowWatchBookmarks=true&timeoutSeconds=600&resourceVersion="+rv, ua, rv)
		}
		if !ok {
			select { // client-go's back-off after a failed request
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (r *benchReflector) get(ctx context.Context, url, ua string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("User-Agent", ua)
	req.Header.Set("Accept", "application/json")
	return http.DefaultClient.Do(req)
}

func (r *benchReflector) list(ctx context.Context, url, ua string) (string, bool) {
	resp, err := r.get(ctx, url, ua)
	if err != nil {
		return "", false
	}
	defer resp.Body.Close()
	var l struct {
		Metadata struct{ ResourceVersion string }
		Items    []struct {
			Metadata struct{ Labels map[string]string }
		}
	}
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&l) != nil {
		return "", false
	}
	r.lists.Add(1)
	for _, it := range l.Items {
		r.saw(it.Metadata.Labels)
	}
	return l.Metadata.ResourceVersion, true
}

// watch returns the resourceVersion to resume from ("" to list again) and whether the watch
// was answered.
func (r *benchReflector) watch(ctx context.Context, url, ua, rv string) (string, bool) {
	resp, err := r.get(ctx, url, ua)
	if err != nil {
		return rv, false
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusGone {
		r.gone.Add(1)
		return "", true
	}
	if resp.StatusCode != http.StatusOK {
		return rv, false
	}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev benchEvent
		if dec.Decode(&ev) != nil {
			return rv, true
		}
		if ev.Type == "ERROR" {
			if ev.Object.Code == http.StatusGone || ev.Object.Reason == "Expired" || ev.Object.Reason == "Gone" {
				r.gone.Add(1)
				return "", true
			}
			return rv, false
		}
		rv = ev.Object.Metadata.ResourceVersion
		r.saw(ev.Object.Metadata.Labels)
	}
}

func (r *benchReflector) saw(labels map[string]string) {
	if m, ok := labels["bench-mark"]; ok {
		r.mark.Store(m)
	}
}

func (r *benchReflector) has(mark string) bool {
	v, _ := r.mark.Load().(string)
	return v == mark
}
