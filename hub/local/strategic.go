package local

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
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
	out, err := smpMap(d, p, t)
	if err != nil {
		return nil, fmt.Errorf("strategic merge patch: %w", err)
	}
	return json.Marshal(out)
}

func smpMap(doc, patch map[string]any, t reflect.Type) (map[string]any, error) {
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
			doc[name] = without(doc[name], drop)
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
			merged, err := smpMap(cur, v, elem(ft))
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
			merged, err := smpList(cur, v, key, elem(ft))
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

// smpList merges a patch list into a list: by mergeKey for objects, by value for scalars.
func smpList(doc, patch []any, mergeKey string, t reflect.Type) ([]any, error) {
	out := append([]any(nil), doc...)
	for _, pe := range patch {
		pm, isMap := pe.(map[string]any)
		if !isMap || mergeKey == "" {
			if !containsValue(out, pe) {
				out = append(out, pe)
			}
			continue
		}
		kv, ok := pm[mergeKey]
		if !ok {
			return nil, fmt.Errorf("list element without its merge key %q", mergeKey)
		}
		i := indexByKey(out, mergeKey, kv)
		if pm["$patch"] == "delete" {
			if i >= 0 {
				out = append(out[:i], out[i+1:]...)
			}
			continue
		}
		var cur map[string]any
		if i >= 0 {
			cur, _ = out[i].(map[string]any)
		}
		merged, err := smpMap(cur, pm, t)
		if err != nil {
			return nil, err
		}
		if i >= 0 {
			out[i] = merged
		} else {
			out = append(out, merged)
		}
	}
	return out, nil
}

// indexByKey is the index of the map in list whose key is v, or -1.
func indexByKey(list []any, key string, v any) int {
	return slices.IndexFunc(list, func(e any) bool {
		m, ok := e.(map[string]any)
		return ok && reflect.DeepEqual(m[key], v)
	})
}

func containsValue(list []any, v any) bool {
	return slices.ContainsFunc(list, func(e any) bool { return reflect.DeepEqual(e, v) })
}

// without is list (when it is one) without the values in drop, as a new slice.
func without(list any, drop []any) any {
	l, ok := list.([]any)
	if !ok {
		return list
	}
	return slices.DeleteFunc(slices.Clone(l), func(e any) bool { return containsValue(drop, e) })
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
