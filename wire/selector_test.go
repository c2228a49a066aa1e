package wire

import "testing"

// Most requests carry no selector (a GET of one object, an unfiltered list) and the cache's tee
// builds one for each: the empty selectors are not parsed, and select everything.
func TestEmptySelectorIsNotParsed(t *testing.T) {
	if n := testing.AllocsPerRun(100, func() { _, _ = NewSelector("ns", "", "") }); n != 0 {
		t.Fatalf("%v allocations for an empty selector", n)
	}
	s, err := NewSelector("ns", "", "")
	if err != nil || !s.Everything() || !s.MatchesObject("ns", nil, func(string) (string, bool) { return "", false }) || s.MatchesObject("other", nil, nil) {
		t.Fatalf("empty selector: %+v, %v", s, err)
	}
}
