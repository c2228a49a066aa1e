package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/e2e/harness"
)

// tokenBatch is a little more than the token store's batch delay (10 s): a batch is on disk after it.
const tokenBatch = 12 * time.Second

// benchTokens measures the token store on its workload: kubelet's token requests for o.pods pods
// (one projected token volume each, as every default pod has) through the hub, then one refresh of
// every token: what the first tokens and each refresh cost the flash (the store's file bytes and
// the hub's /proc/<pid>/io write_bytes over the window, which also counts the hub's other writes
// then), and the latency of an offline token request answered from the store.
func benchTokens(e *env, o options) error {
	ns, sa := "bench-tokens", "app"
	if err := e.c.EnsureNamespace(e.ctx, ns); err != nil {
		return err
	}
	if _, err := e.c.Admin.CoreV1().ServiceAccounts(ns).Create(e.ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); ignoreExists(err) != nil {
		return err
	}
	exp := int64(3607)
	pods := make([]*corev1.Pod, o.pods)
	err := parallel(o.pods, func(i int) error {
		f := false
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("tok-%03d", i)},
			Spec: corev1.PodSpec{NodeName: harness.NodeName, ServiceAccountName: sa, AutomountServiceAccountToken: &f,
				Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/app:1"}},
				Volumes: []corev1.Volume{{Name: "kube-api-access", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
					Sources: []corev1.VolumeProjection{{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: &exp}}}}}}}}}
		got, err := e.c.Admin.CoreV1().Pods(ns).Create(e.ctx, p, metav1.CreateOptions{})
		if ignoreExists(err) != nil {
			return err
		}
		if got == nil || got.UID == "" {
			if got, err = e.c.Admin.CoreV1().Pods(ns).Get(e.ctx, p.Name, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		pods[i] = got
		return nil
	})
	if err != nil {
		return err
	}
	relay, dir, err := e.relay()
	if err != nil {
		return err
	}
	defer relay.Refuse()
	h, err := e.c.StartHub(e.ctx, harness.HubOptions{Bin: e.bin, Dir: dir, Servers: relay.URL(), Args: []string{"--v=2"}})
	if err != nil {
		return err
	}
	defer h.Stop()
	if err := h.WaitHTTP(e.ctx, "/v1/readyz", 20*time.Second); err != nil {
		return err
	}
	kubelet := h.Client(kubeletUA, true)
	request := func(p *corev1.Pod) error {
		_, err := kubelet.CoreV1().ServiceAccounts(ns).CreateToken(e.ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: &exp, BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}}}, metav1.CreateOptions{})
		return err
	}
	round := func() (disk int64, err error) {
		before, err := diskWriteBytes(h.Pid())
		if err != nil {
			return 0, err
		}
		for _, p := range pods {
			if err := request(p); err != nil {
				return 0, err
			}
		}
		time.Sleep(tokenBatch)
		after, err := diskWriteBytes(h.Pid())
		return after - before, err
	}
	storeBytes := func() (n int, size int64) {
		des, _ := os.ReadDir(filepath.Join(h.RootDir, "tokens"))
		for _, de := range des {
			if fi, err := de.Info(); err == nil {
				n++
				size += fi.Size()
			}
		}
		return n, size
	}
	first, err := round()
	if err != nil {
		return err
	}
	files, size := storeBytes()
	refresh, err := round()
	if err != nil {
		return err
	}

	if err := relay.BlackHole(); err != nil {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if v, _ := h.Metric(`nodehub_server_healthy{server="` + relay.Addr + `"}`); v == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("tokens: the hub did not notice the black hole")
		}
	}
	var ds []time.Duration
	for i := 0; i < 5*len(pods); i++ {
		t0 := time.Now()
		if err := request(pods[i%len(pods)]); err != nil {
			return err
		}
		ds = append(ds, time.Since(t0))
	}

	fmt.Printf("\n## tokens, %d pods with a projected token volume, kubelet's token requests through the hub (protobuf)\n", o.pods)
	fmt.Printf("token store after the first requests\t%d files, %d B (%d B per token)\n", files, size, size/int64(max(files, 1)))
	fmt.Printf("disk bytes written (/proc io) for the first %d tokens / for one refresh of each\t%d / %d B (%d B per refreshed token; the window's other hub writes included)\n",
		len(pods), first, refresh, refresh/int64(len(pods)))
	fmt.Printf("offline token request answered from the store, median / p99\t%v / %v\n", pct(ds, 50), pct(ds, 99))
	return nil
}
