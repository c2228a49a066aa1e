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
		switch {
		case k == "$patch" || strings.HasPrefix(k, "$setElementOrder/"):
			continue
		case k == "$retainKeys":
			retain, _ = pv.([]any)
			continue
		case strings.HasPrefix(k, "$deleteFromPrimitiveList/"):
			name := strings.TrimPrefix(k, "$deleteFromPrimitiveList/")
			drop, _ := pv.([]any)
			rest, err := without(doc[name], drop, w)
			if err != nil {
				return nil, err
			}
			doc[name] = rest
			continue
		}
		ft, strategy, key := field(t, k)
		if pv == nil {
			delete(doc, k)
			continue
		}
		switch v := pv.(type) {
		case map[string]any:
			cur, _ := doc[k].(map[string]any)
			merged, err := smpMap(cur, v, elem(ft), w)
			if err != nil {
				return nil, err
			}
			if merged == nil {
				delete(doc, k)
			} else {
				doc[k] = merged
			}
		case []any:
			if !strings.Contains(strategy, "merge") {
				doc[k] = v
				continue
			}
			cur, _ := doc[k].([]any)
			merged, err := smpList(cur, v, key, elem(ft), w)
			if err != nil {
				return nil, err
			}
			doc[k] = merged
		default:
			doc[k] = v
		}
	}
	if retain != nil {
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
	return doc, nil
}

// smpList merges a patch list into a list: by mergeKey for objects, by value for scalars. The
// list's elements are indexed once (by their merge key's, or their own, JSON), so a patch of n
// elements into a list of m costs n+m, not n×m.
func smpList(doc, patch []any, mergeKey string, t reflect.Type, w *patchWork) ([]any, error) {
	out := append([]any(nil), doc...)
	if err := w.spend(len(out) + len(patch)); err != nil {
		return nil, err
	}
	byValue := map[string]int{} // JSON of an element → its index in out
	byKey := map[string]int{}   // JSON of a map element's merge key → its index in out
	index := func(i int) error {
		kv, err := canonical(out[i], w)
		if err != nil {
			return err
		}
		if _, dup := byValue[kv]; !dup {
			byValue[kv] = i
		}
		if m, ok := out[i].(map[string]any); ok && mergeKey != "" {
			if k, ok := m[mergeKey]; ok {
				kk, err := canonical(k, w)
				if err != nil {
					return err
				}
				if _, dup := byKey[kk]; !dup {
					byKey[kk] = i
				}
			}
		}
		return nil
	}
	for i := range out {
		if err := index(i); err != nil {
			return nil, err
		}
	}
	deleted := map[int]bool{}
	for _, pe := range patch {
		pm, isMap := pe.(map[string]any)
		if !isMap || mergeKey == "" {
			pv, err := canonical(pe, w)
			if err != nil {
				return nil, err
			}
			if _, ok := byValue[pv]; !ok {
				out = append(out, pe)
				byValue[pv] = len(out) - 1
			}
			continue
		}
		kv, ok := pm[mergeKey]
		if !ok {
			return nil, fmt.Errorf("list element without its merge key %q", mergeKey)
		}
		kk, err := canonical(kv, w)
		if err != nil {
			return nil, err
		}
		i, found := byKey[kk]
		if pm["$patch"] == "delete" {
			if found {
				deleted[i] = true
				delete(byKey, kk)
			}
			continue
		}
		var cur map[string]any
		if found {
			cur, _ = out[i].(map[string]any)
		}
		merged, err := smpMap(cur, pm, t, w)
		if err != nil {
			return nil, err
		}
		if found {
			out[i] = merged
		} else {
			out = append(out, merged)
			byKey[kk] = len(out) - 1
		}
	}
	if len(deleted) > 0 {
		kept := out[:0]
		for i, e := range out {
			if !deleted[i] {
				kept = append(kept, e)
			}
		}
		out = kept
	}
	return out, nil
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
