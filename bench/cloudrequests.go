package main

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// apiBytes is the apiserver's account of what it served, by request kind (issue 29 item 4: which
// requests a pool that cannot form pays beyond node level): for "resource verb" the requests
// completed and the bytes of their answers (apiserver_request_total,
// apiserver_response_sizes_sum; a watch's answer is its events), for "kind events" the watch
// events sent, bookmarks among them, and their bytes (apiserver_watch_events_total,
// apiserver_watch_events_sizes_sum). Bodies only: the frames' and headers' bytes are the relay's.
type apiBytes map[string]*apiKind

type apiKind struct{ n, bytes float64 }

func readAPIBytes(e *env) (apiBytes, error) {
	raw, err := e.c.Admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(e.ctx)
	if err != nil {
		return nil, err
	}
	b := apiBytes{}
	add := func(key string, n, bytes float64) {
		k := b[key]
		if k == nil {
			k = &apiKind{}
			b[key] = k
		}
		k.n, k.bytes = k.n+n, k.bytes+bytes
	}
	for _, line := range strings.Split(string(raw), "\n") {
		name, _, ok := strings.Cut(line, "{")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			continue
		}
		req := label(line, "resource")
		if s := label(line, "subresource"); s != "" {
			req += "/" + s
		}
		req += " " + label(line, "verb")
		ev := label(line, "resource") // the events' resource (their kind before v1.32)
		if ev == "" {
			ev = label(line, "kind")
		}
		ev += " events"
		switch name {
		case "apiserver_request_total":
			add(req, v, 0)
		case "apiserver_response_sizes_sum":
			add(req, 0, v)
		case "apiserver_watch_events_total":
			add(ev, v, 0)
		case "apiserver_watch_events_sizes_sum":
			add(ev, 0, v)
		}
	}
	return b, nil
}

// perDay prints what changed from a to b, per node per day (scale: per day and node over the
// window), request kind by request kind.
func (b apiBytes) perDay(a apiBytes, scale float64) string {
	var keys []string
	for k, v := range b {
		old := a[k]
		if old == nil {
			old = &apiKind{}
		}
		if v.n-old.n > 0 || v.bytes-old.bytes > 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		old := a[k]
		if old == nil {
			old = &apiKind{}
		}
		parts = append(parts, fmt.Sprintf("%s %.0f/%.1f", k, (b[k].n-old.n)*scale, (b[k].bytes-old.bytes)*scale/1024))
	}
	return strings.Join(parts, ", ")
}
