package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// fakeKubelet answers the apiserver's exec connection with a SPDY upgrade and echoes the stream, so
// the test sees bytes cross client → hub → kube-apiserver → "kubelet" and back.
func fakeKubelet(t *testing.T) int {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(cluster.Dir+"/apiserver.crt", cluster.Dir+"/apiserver.key")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/exec/") || r.Header.Get("Upgrade") == "" {
			http.Error(w, "want an exec upgrade", http.StatusBadRequest)
			return
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		fmt.Fprintf(rw, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: %s\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n", r.Header.Get("Upgrade"))
		rw.Flush()
		_, _ = io.Copy(conn, rw)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

func TestExecUpgradePassesThrough(t *testing.T) {
	ctx := context.Background()
	kport := fakeKubelet(t)
	node, err := cluster.Admin.CoreV1().Nodes().Get(ctx, harness.NodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(kport)
	if _, err := cluster.Admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ns := "upgrade"
	nodePods(t, ns, "p")
	token := serviceAccountToken(t, ns, "ops",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/exec"}, Verbs: []string{"create", "get"}},
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}})

	h := startHub(t)
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(h.ProxyURL, "http://"), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(conn, "POST /api/v1/namespaces/%s/pods/p/exec?command=sh&container=c&stdin=true&stdout=true HTTP/1.1\r\n"+
		"Host: hub\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"+
		"X-Stream-Protocol-Version: v4.channel.k8s.io\r\nUser-Agent: kubectl/v1.34.4\r\nContent-Length: 0\r\n\r\n", ns, token)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("exec through the hub: %s %s", resp.Status, body)
	}
	for _, msg := range []string{"ping-1\n", strings.Repeat("x", 100000) + "\n"} {
		if _, err := io.WriteString(conn, msg); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil {
			t.Fatalf("echo: %v", err)
		}
		if string(got) != msg {
			t.Fatalf("echo mismatch: %q", got[:min(len(got), 40)])
		}
	}
}
