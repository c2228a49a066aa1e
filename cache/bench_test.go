package cache

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/wire"
)

// BenchmarkOfflineList110Pods reads the node's 110 pods back as the offline proxy does.
func BenchmarkOfflineList110Pods(b *testing.B) {
	s, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	r := Resource{Owner: "kubelet", Version: "v1", Resource: "pods"}
	for i := 0; i < 110; i++ {
		p := pod(fmt.Sprintf("pod-%03d", i), "edge-1", fmt.Sprint(i+1), map[string]string{"app": "x"})
		p.Spec.Containers = []corev1.Container{{Name: "c", Image: "img", Env: []corev1.EnvVar{{Name: "A", Value: fmt.Sprintf("%0200d", i)}}}}
		raw, _ := wire.EncodeProto("v1", "Pod", p)
		m, _ := wire.ExtractMeta(raw, "pods")
		h := headerFor(m, wire.MediaProtobuf)
		if err := s.Put(Key{Resource: r, Namespace: "default", Name: m.Name}, &h, raw); err != nil {
			b.Fatal(err)
		}
	}
	s.PutList(r, ListRecord{FieldSelector: "spec.nodeName=edge-1", Complete: true, APIVersion: "v1", Kind: "Pod"})
	sel, _ := wire.NewSelector("", "", "spec.nodeName=edge-1")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := 0
		if _, err := s.EachInList(r, sel, func(Item) error { n++; return nil }); err != nil || n != 110 {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkWatchEventToDisk is the cache's CPU per EndpointSlice update: a protobuf watch event
// (a 10-endpoint slice, 1.4 KB) parsed, compared with the index, compressed and appended.
func BenchmarkWatchEventToDisk(b *testing.B) {
	s, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	m := &Manager{Policy: Policy{Agents: []string{"*"}}, Store: s, Writer: NewWriter(s, 0, nil)}
	r, _ := http.NewRequest("GET", "http://hub/apis/discovery.k8s.io/v1/endpointslices?watch=true", nil)
	r.Header.Set("User-Agent", "kube-proxy/1")
	ri, _ := wire.ParseRequest(r)
	pr, pw := io.Pipe()
	tb := m.Tee(ri, "kube-proxy", &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {wire.MediaProtobuf + ";stream=watch"}}, Body: pr})
	go io.Copy(io.Discard, tb)
	frames := make([][]byte, 1000)
	for i := range frames {
		raw, err := wire.EncodeProto("discovery.k8s.io/v1", "EndpointSlice", benchSlice(i, 1))
		if err != nil {
			b.Fatal(err)
		}
		frames[i] = raw
	}
	ctx := context.Background()
	events := make([][]byte, b.N)
	for i := range events {
		obj := bytes.Replace(frames[i%len(frames)], []byte("rv-000000"), []byte(fmt.Sprintf("%09d", i+1)), 1)
		events[i] = wire.EncodeProtoWatchEvent(wire.WatchEvent{Type: wire.EventModified, Object: obj})
	}
	var ru0, ru1 syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru0)
	b.ResetTimer()
	for i, ev := range events {
		pw.Write(ev)
		if i%500 == 499 {
			m.Writer.Flush(ctx) // as a watch's pace would: the queue is bounded
		}
	}
	m.Writer.Flush(ctx)
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru1)
	cpu := time.Duration(ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano())
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/event")
	pw.Close()
	if s.Stats().FilesWritten < int64(b.N)/2 {
		b.Fatalf("%d records for %d events", s.Stats().FilesWritten, b.N)
	}
}

func benchSlice(i, gen int) *discoveryv1.EndpointSlice {
	port, proto := int32(8080), corev1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%04d-x", i), Namespace: "profile", UID: "0f3c1c2e-1111-2222-3333-444455556666",
		ResourceVersion: "rv-000000", Labels: map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("svc-%04d", i)}},
		AddressType: discoveryv1.AddressTypeIPv4, Ports: []discoveryv1.EndpointPort{{Port: &port, Protocol: &proto}}}
	for j := 0; j < 10; j++ {
		node, ready := "edge-1", true
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", i%250, j, gen%250+1)}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: &node,
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "profile", Name: fmt.Sprintf("pod-%d-%d-abcdefgh", i, j), UID: "0f3c1c2e-1111-2222-3333-444455556666"}})
	}
	return s
}
