package wire

import (
	"bytes"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	jsonser "k8s.io/apimachinery/pkg/runtime/serializer/json"
	protoser "k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
)

// encoders produce bodies exactly as the apiserver's serializers do.
func encoders(t testing.TB) (js, pb runtime.Encoder) {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	metav1.AddToGroupVersion(s, corev1.SchemeGroupVersion)
	return jsonser.NewSerializerWithOptions(jsonser.DefaultMetaFactory, s, s, jsonser.SerializerOptions{}),
		protoser.NewSerializer(s, s)
}

func encode(t testing.TB, e runtime.Encoder, obj runtime.Object) []byte {
	var b bytes.Buffer
	if err := e.Encode(obj, &b); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func testPod(i int) *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("p-%d", i), Namespace: "ns", UID: "u", ResourceVersion: fmt.Sprint(100 + i),
			Labels: map[string]string{"app": "x", "i": fmt.Sprint(i)}},
		Spec:   corev1.PodSpec{NodeName: "edge-1", Containers: []corev1.Container{{Name: "c", Image: `img:"quoted"\{`}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}

func podList(n int) *corev1.PodList {
	l := &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, ListMeta: metav1.ListMeta{ResourceVersion: "555", Continue: "tok"}}
	for i := 0; i < n; i++ {
		p := testPod(i)
		p.TypeMeta = metav1.TypeMeta{}
		l.Items = append(l.Items, *p)
	}
	return l
}

func TestListSplitterMatchesSingleObjects(t *testing.T) {
	js, pb := encoders(t)
	for _, tc := range []struct {
		name  string
		enc   runtime.Encoder
		media MediaType
	}{{"json", js, MediaType{Type: MediaJSON}}, {"protobuf", pb, MediaType{Type: MediaProtobuf}}} {
		for _, chunk := range []int{1, 7, 64, 1 << 20} {
			t.Run(fmt.Sprintf("%s/chunk=%d", tc.name, chunk), func(t *testing.T) {
				body := encode(t, tc.enc, podList(5))
				var items [][]byte
				var meta ListMeta
				sp := NewListSplitter(tc.media, ListHandler{Meta: func(m ListMeta) { meta = m }, Item: func(b []byte) error { items = append(items, b); return nil }})
				for off := 0; off < len(body); off += chunk {
					if _, err := sp.Write(body[off:min(off+chunk, len(body))]); err != nil {
						t.Fatal(err)
					}
				}
				if err := sp.Close(); err != nil {
					t.Fatal(err)
				}
				if meta.ResourceVersion != "555" || meta.Continue != "tok" || meta.Kind != "PodList" || meta.APIVersion != "v1" {
					t.Fatalf("meta %+v", meta)
				}
				if len(items) != 5 {
					t.Fatalf("%d items", len(items))
				}
				for i, got := range items {
					want := bytes.TrimSuffix(encode(t, tc.enc, testPod(i)), []byte("\n"))
					if !bytes.Equal(got, want) {
						t.Fatalf("item %d differs from a GET of it:\n got %q\nwant %q", i, got, want)
					}
				}
			})
		}
	}
}

func TestListSplitterEmptyAndTruncated(t *testing.T) {
	js, pb := encoders(t)
	for _, tc := range []struct {
		enc   runtime.Encoder
		media MediaType
	}{{js, MediaType{Type: MediaJSON}}, {pb, MediaType{Type: MediaProtobuf}}} {
		empty := encode(t, tc.enc, &corev1.PodList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}, ListMeta: metav1.ListMeta{ResourceVersion: "9"}})
		var meta ListMeta
		sp := NewListSplitter(tc.media, ListHandler{Meta: func(m ListMeta) { meta = m }, Item: func([]byte) error { t.Fatal("item in empty list"); return nil }})
		sp.Write(empty)
		if err := sp.Close(); err != nil || meta.ResourceVersion != "9" {
			t.Fatalf("%s empty: %v %+v", tc.media.Type, err, meta)
		}
		full := encode(t, tc.enc, podList(3))
		sp = NewListSplitter(tc.media, ListHandler{})
		sp.Write(full[:len(full)-10])
		if err := sp.Close(); err == nil {
			t.Fatalf("%s: truncated list closed without error", tc.media.Type)
		}
	}
}

func FuzzJSONListSplitter(f *testing.F) {
	js, _ := encoders(f)
	f.Add(encode(f, js, podList(2)), 5)
	for _, b := range realSeeds(f, "*list.json") {
		f.Add(b, 7)
	}
	f.Add([]byte(`{"kind":"XList","items":[{"a":"}"},{"b":[1,{"c":"\""}]}]}`), 3)
	f.Fuzz(func(t *testing.T, body []byte, chunk int) {
		if chunk <= 0 {
			chunk = 1
		}
		collect := func(step int) ([][]byte, error) {
			var items [][]byte
			sp := NewListSplitter(MediaType{Type: MediaJSON}, ListHandler{Item: func(b []byte) error { items = append(items, b); return nil }})
			for off := 0; off < len(body); off += step {
				if _, err := sp.Write(body[off:min(off+step, len(body))]); err != nil {
					return items, err
				}
			}
			return items, sp.Close()
		}
		a, errA := collect(len(body) + 1)
		b, errB := collect(chunk)
		if (errA == nil) != (errB == nil) || len(a) != len(b) {
			t.Fatalf("chunking changed the result: %v/%v, %d/%d items", errA, errB, len(a), len(b))
		}
		for i := range a {
			if !bytes.Equal(a[i], b[i]) {
				t.Fatalf("item %d differs with chunking", i)
			}
		}
	})
}

func FuzzProtoListSplitter(f *testing.F) {
	_, pb := encoders(f)
	f.Add(encode(f, pb, podList(2)), 5)
	for _, b := range realSeeds(f, "*list.pb") {
		f.Add(b, 7)
	}
	f.Fuzz(func(t *testing.T, body []byte, chunk int) {
		if chunk <= 0 {
			chunk = 1
		}
		split := func(chunk int) ([][]byte, error) {
			var items [][]byte
			sp := NewListSplitter(MediaType{Type: MediaProtobuf}, ListHandler{Item: func(raw []byte) error {
				items = append(items, raw) // kept as given: an item must not alias the writer's buffer
				return nil
			}})
			scratch := make([]byte, chunk)
			for off := 0; off < len(body); off += chunk {
				c := scratch[:copy(scratch, body[off:min(off+chunk, len(body))])]
				n, err := sp.Write(c)
				if err != nil {
					return nil, err
				}
				if n != len(c) {
					t.Fatalf("Write took %d of %d bytes", n, len(c))
				}
				for i := range scratch {
					scratch[i] = 0xff // the writer reuses its buffer
				}
			}
			return items, sp.Close()
		}
		got, err := split(chunk)
		if err != nil {
			return
		}
		want, err := split(len(body) + 1)
		if err != nil {
			t.Fatalf("whole body fails where chunks of %d did not: %v", chunk, err)
		}
		if len(got) != len(want) {
			t.Fatalf("%d items in chunks of %d, %d whole", len(got), chunk, len(want))
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("item %d differs in chunks of %d", i, chunk)
			}
		}
	})
}
