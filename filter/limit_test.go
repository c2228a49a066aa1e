package filter

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"

	"nodehub/wire"
)

// A watch frame over wire.MaxObjectBytes ends the filtered stream with the events before it and
// an ERROR event carrying a 502 Status, never holding more than the cap.
func TestWatchFilterEndsWithErrorEventOnOversizedFrame(t *testing.T) {
	s := set(t, Config{NodeName: "edge-1", MasterServiceHost: "169.254.2.1", MasterServicePort: 10268})
	c := chain(t, s, "kubelet", "/api/v1/services")
	first := `{"type":"ADDED","object":{"kind":"Service","apiVersion":"v1","metadata":{"namespace":"a","name":"b"}}}` + "\n"
	for _, tc := range []struct {
		media wire.MediaType
		body  io.Reader
	}{
		{wire.MediaType{Type: wire.MediaJSON}, io.MultiReader(strings.NewReader(first+`{"type":"ADDED","object":{"x":"`), endlessReader{})},
		{wire.MediaType{Type: wire.MediaProtobuf}, io.MultiReader(bytes.NewReader(binary.BigEndian.AppendUint32(nil, wire.MaxObjectBytes+1)), endlessReader{})},
	} {
		out, err := io.ReadAll(c.Watch(io.NopCloser(tc.body), tc.media))
		if err != nil {
			t.Fatalf("%s: %v", tc.media.Type, err)
		}
		var events []wire.WatchEvent
		sp := wire.NewWatchSplitter(tc.media, func(ev wire.WatchEvent) error { events = append(events, ev); return nil })
		if _, err := sp.Write(out); err != nil || len(events) == 0 {
			t.Fatalf("%s: %v, %d events", tc.media.Type, err, len(events))
		}
		last := events[len(events)-1]
		if last.Type != wire.EventError || !bytes.Contains(last.Object, []byte("could not be read")) {
			t.Fatalf("%s: last event %s %q", tc.media.Type, last.Type, last.Object)
		}
		if tc.media.Type == wire.MediaJSON && (len(events) != 2 || events[0].Type != wire.EventAdded) {
			t.Fatalf("JSON: %d events", len(events))
		}
	}
}

// endlessReader is a body that never ends.
type endlessReader struct{}

func (endlessReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// A list whose item is over the cap is an error for Body (the caller answers 502), not a list
// passed on unfiltered.
func TestBodyRefusesOversizedItem(t *testing.T) {
	s := set(t, Config{NodeName: "edge-1", MasterServiceHost: "169.254.2.1", MasterServicePort: 10268})
	c := chain(t, s, "kubelet", "/api/v1/services")
	big := `{"kind":"ServiceList","apiVersion":"v1","items":[{"metadata":{"name":"kubernetes","namespace":"default"},"x":"` + strings.Repeat("y", wire.MaxObjectBytes) + `"}]}`
	if _, err := c.Body([]byte(big), wire.MediaType{Type: wire.MediaJSON}, true); !errors.Is(err, wire.ErrTooLarge) {
		t.Fatalf("Body: %v", err)
	}
}
