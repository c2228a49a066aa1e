package local

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

// strategicMergePatch applies a Kubernetes strategic merge patch to a JSON object whose Go type
// (a k8s.io/api struct) carries the patch strategy in its field tags: lists tagged
// patchStrategy:"merge" merge by their patchMergeKey (conditions by type, addresses by type, …) or,
// for lists of scalars, by value; other lists are replaced; maps merge, null deletes. The
// directives kubelet's patches carry ($patch, $setElementOrder, $deleteFromPrimitiveList,
// $retainKeys) are honoured, element order aside. This is the part of apimachinery's
// strategicpatch nodehub needs offline, without its OpenAPI dependencies.
func strategicMergePatch(doc, patch []byte, t reflect.Type) ([]byte, error) {
	var d, p map[string]any
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, fmt.Errorf("strategic merge patch: %w", err)
	}
	out, err := smpMap(d, p, t, &patchWork{})
	if err != nil {
		return nil, fmt.Errorf("strategic merge patch: %w", err)
	}
	return json.Marshal(out)
}

func smpMap(doc, patch map[string]any, t reflect.Type, w *patchWork) (map[string]any, error) {
	if err := w.spend(len(patch) + 1); err != nil {
		return nil, err
	}
	if doc == nil {
		doc = map[string]any{}
	}
	switch patch["$patch"] {
	case "replace":
		delete(patch, "$patch")
		return patch, nil
	case "delete":
		return nil, nil
	}
	var retain []any
	for k, pv := range patch {
		var err error
		switch {
		case k == "$patch" || strings.HasPrefix(k, "$setElementOrder/"):
		case k == "$retainKeys":
			retain, _ = pv.([]any)
		case strings.HasPrefix(k, "$deleteFromPrimitiveList/"):
			name := strings.TrimPrefix(k, "$deleteFromPrimitiveList/")
			drop, _ := pv.([]any)
			doc[name], err = without(doc[name], drop, w)
		default:
			err = smpField(doc, k, pv, t, w)
		}
		if err != nil {
			return nil, err
		}
	}
	if retain != nil {
		retainKeys(doc, retain)
	}
	return doc, nil
}

// smpField merges the patch's value pv of field k into doc (of type t): null deletes, a map
// merges, a list merges by its strategy (or is replaced), anything else replaces.
func smpField(doc map[string]any, k string, pv any, t reflect.Type, w *patchWork) error {
	ft, strategy, key := field(t, k)
	switch v := pv.(type) {
	case nil:
		delete(doc, k)
	case map[string]any:
		cur, _ := doc[k].(map[string]any)
		merged, err := smpMap(cur, v, elem(ft), w)
		if err != nil {
			return err
		}
		if merged == nil {
			delete(doc, k)
		} else {
			doc[k] = merged
		}
	case []any:
		if !strings.Contains(strategy, "merge") {
			doc[k] = v
			return nil
		}
		cur, _ := doc[k].([]any)
		merged, err := smpList(cur, v, key, elem(ft), w)
		if err != nil {
			return err
		}
		doc[k] = merged
	default:
		doc[k] = v
	}
	return nil
}

// retainKeys drops doc's keys that retain ($retainKeys) does not name.
func retainKeys(doc map[string]any, retain []any) {
	keep := map[string]bool{}
	for _, r := range retain {
		if s, ok := r.(string); ok {
			keep[s] = true
		}
	}
	for k := range doc {
		if !keep[k] {
			delete(doc, k)
		}
	}
}

// smpList merges a patch list into a list: by mergeKey for objects, by value for scalars. The
// list's elements are indexed once (by their merge key's, or their own, JSON), so a patch of n
// elements into a list of m costs n+m, not n×m.
func smpList(doc, patch []any, mergeKey string, t reflect.Type, w *patchWork) ([]any, error) {
	l := &mergeList{
		out: append([]any(nil), doc...), mergeKey: mergeKey, w: w,
		byValue: map[string]int{}, byKey: map[string]int{}, deleted: map[int]bool{},
	}
	if err := w.spend(len(l.out) + len(patch)); err != nil {
		return nil, err
	}
	for i := range l.out {
		if err := l.index(i); err != nil {
			return nil, err
		}
	}
	for _, pe := range patch {
		var err error
		if pm, isMap := pe.(map[string]any); isMap && mergeKey != "" {
			err = l.mergeObject(pm, t)
		} else {
			err = l.mergeValue(pe)
		}
		if err != nil {
			return nil, err
		}
	}
	return l.kept(), nil
}

// mergeList is a list being merged into, with its elements indexed.
type mergeList struct {
	out      []any
	mergeKey string
	w        *patchWork
	byValue  map[string]int // JSON of an element → its index in out
	byKey    map[string]int // JSON of a map element's merge key → its index in out
	deleted  map[int]bool   // indexes in out a $patch: delete removed
}

// index indexes out[i] by its JSON and, for an object, by its merge key's; the first of equals
// wins.
func (l *mergeList) index(i int) error {
	kv, err := canonical(l.out[i], l.w)
	if err != nil {
		return err
	}
	if _, dup := l.byValue[kv]; !dup {
		l.byValue[kv] = i
	}
	if m, ok := l.out[i].(map[string]any); ok && l.mergeKey != "" {
		if k, ok := m[l.mergeKey]; ok {
			kk, err := canonical(k, l.w)
			if err != nil {
				return err
			}
			if _, dup := l.byKey[kk]; !dup {
				l.byKey[kk] = i
			}
		}
	}
	return nil
}

// mergeValue adds a value the list does not hold yet.
func (l *mergeList) mergeValue(pe any) error {
	pv, err := canonical(pe, l.w)
	if err != nil {
		return err
	}
	if _, ok := l.byValue[pv]; !ok {
		l.out = append(l.out, pe)
		l.byValue[pv] = len(l.out) - 1
	}
	return nil
}

// mergeObject merges an object (of type t) into the element with its merge key, adds it if there
// is none, or deletes that element ($patch: delete).
func (l *mergeList) mergeObject(pm map[string]any, t reflect.Type) error {
	kv, ok := pm[l.mergeKey]
	if !ok {
		return fmt.Errorf("list element without its merge key %q", l.mergeKey)
	}
	kk, err := canonical(kv, l.w)
	if err != nil {
		return err
	}
	i, found := l.byKey[kk]
	if pm["$patch"] == "delete" {
		if found {
			l.deleted[i] = true
			delete(l.byKey, kk)
		}
		return nil
	}
	var cur map[string]any
	if found {
		cur, _ = l.out[i].(map[string]any)
	}
	merged, err := smpMap(cur, pm, t, l.w)
	if err != nil {
		return err
	}
	if found {
		l.out[i] = merged
	} else {
		l.out = append(l.out, merged)
		l.byKey[kk] = len(l.out) - 1
	}
	return nil
}

// kept is the merged list without the elements deleted.
func (l *mergeList) kept() []any {
	if len(l.deleted) == 0 {
		return l.out
	}
	kept := l.out[:0]
	for i, e := range l.out {
		if !l.deleted[i] {
			kept = append(kept, e)
		}
	}
	return kept
}

// canonical is v's JSON (maps with sorted keys), as an element's identity in a list; its work is
// counted.
func canonical(v any, w *patchWork) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return string(b), w.spend(len(b))
}

// without is list (when it is one) without the values in drop, as a new slice.
func without(list any, drop []any, w *patchWork) (any, error) {
	l, ok := list.([]any)
	if !ok {
		return list, nil
	}
	gone := map[string]bool{}
	for _, d := range drop {
		k, err := canonical(d, w)
		if err != nil {
			return nil, err
		}
		gone[k] = true
	}
	out := make([]any, 0, len(l))
	for _, e := range l {
		k, err := canonical(e, w)
		if err != nil {
			return nil, err
		}
		if !gone[k] {
			out = append(out, e)
		}
	}
	return out, nil
}

// field finds the struct field with JSON name name (looking through embedded structs) and returns
// its type and patch tags. An unknown field (or a map's key) has no strategy.
func field(t reflect.Type, name string) (reflect.Type, string, string) {
	t = deref(t)
	if t == nil || t.Kind() != reflect.Struct {
		if t != nil && t.Kind() == reflect.Map {
			return t.Elem(), "", ""
		}
		return nil, "", ""
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && tag == "" {
			if ft, s, k := field(f.Type, name); ft != nil {
				return ft, s, k
			}
			continue
		}
		if tag == name {
			return f.Type, f.Tag.Get("patchStrategy"), f.Tag.Get("patchMergeKey")
		}
	}
	return nil, "", ""
}

// elem is the type inside pointers and slices.
func elem(t reflect.Type) reflect.Type {
	t = deref(t)
	for t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		t = deref(t.Elem())
	}
	return t
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}
