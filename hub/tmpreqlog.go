package hub

import (
	"fmt"
	"os"
	"time"
)

// TEMP request log for the csinode investigation.
func tmpReqLog(q *proxyRequest) {
	path := os.Getenv("NODEHUB_REQLOG")
	if path == "" || q.ri.Component != "kubelet" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s %s?%s code=%d dur=%v ctxerr=%v\n", time.Now().UTC().Format("15:04:05.000"), q.r.Method, q.r.URL.Path, q.r.URL.RawQuery, q.w.code(), time.Since(q.start).Round(time.Millisecond), q.ctx.Err())
}
