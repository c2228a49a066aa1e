package local

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"

	"nodehub/wire"
)

// applyPatch applies a JSON merge patch, strategic merge patch (built-in kinds) or JSON patch to a
// cached object and returns the result in the object's stored format.
func applyPatch(current, patch []byte, contentType string) ([]byte, error) {
	protobuf := ctOf(current) == wire.MediaProtobuf
	js, err := wire.Convert(current, false)
	if err != nil {
		return nil, err
	}
	var out []byte
	switch wire.ParseMediaType(contentType).Type {
	case "application/merge-patch+json":
		out, err = mergePatch(js, patch)
	case "application/strategic-merge-patch+json":
		obj, derr := wire.Decode(js)
		if derr != nil {
			return nil, &statusError{http.StatusUnsupportedMediaType, "nodehub: strategic merge patch of this kind is not supported offline"}
		}
		out, err = strategicMergePatch(js, patch, reflect.TypeOf(obj))
	case "application/json-patch+json":
		out, err = jsonPatch(js, patch)
	default:
		return nil, &statusError{http.StatusUnsupportedMediaType, "nodehub: patch type " + contentType + " is not supported offline"}
	}
	if err != nil {
		return nil, err
	}
	return wire.Convert(out, protobuf)
}

// mergePatch applies an RFC 7386 JSON merge patch.
func mergePatch(doc, patch []byte) ([]byte, error) {
	var d, p any
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	if err := json.Unmarshal(patch, &p); err != nil {
		return nil, fmt.Errorf("merge patch: %w", err)
	}
	return json.Marshal(merge(d, p))
}

func merge(doc, patch any) any {
	pm, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	dm, ok := doc.(map[string]any)
	if !ok {
		dm = map[string]any{}
	}
	for k, v := range pm {
		if v == nil {
			delete(dm, k)
			continue
		}
		dm[k] = merge(dm[k], v)
	}
	return dm
}

// jsonPatch applies an RFC 6902 JSON patch.
func jsonPatch(doc, patch []byte) ([]byte, error) {
	var d any
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		From  string          `json:"from"`
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, fmt.Errorf("json patch: %w", err)
	}
	for _, op := range ops {
		var v any
		if len(op.Value) > 0 {
			if err := json.Unmarshal(op.Value, &v); err != nil {
				return nil, fmt.Errorf("json patch %s %s: %w", op.Op, op.Path, err)
			}
		}
		var err error
		switch op.Op {
		case "add":
			d, err = put(d, pointer(op.Path), v, true)
		case "replace":
			if _, err = get(d, pointer(op.Path)); err == nil {
				d, err = put(d, pointer(op.Path), v, false)
			}
		case "remove":
			d, err = remove(d, pointer(op.Path))
		case "test":
			var cur any
			if cur, err = get(d, pointer(op.Path)); err == nil {
				a, _ := json.Marshal(cur)
				b, _ := json.Marshal(v)
				if string(a) != string(b) {
					err = fmt.Errorf("test failed at %s", op.Path)
				}
			}
		case "move", "copy":
			var cur any
			if cur, err = get(d, pointer(op.From)); err == nil {
				if op.Op == "move" {
					d, err = remove(d, pointer(op.From))
				}
				if err == nil {
					d, err = put(d, pointer(op.Path), cur, true)
				}
			}
		default:
			err = fmt.Errorf("unknown op %q", op.Op)
		}
		if err != nil {
			return nil, fmt.Errorf("json patch: %w", err)
		}
	}
	return json.Marshal(d)
}

// pointer splits an RFC 6901 JSON pointer.
func pointer(p string) []string {
	if p == "" {
		return nil
	}
	parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, s := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return parts
}

func get(d any, path []string) (any, error) {
	for _, k := range path {
		switch c := d.(type) {
		case map[string]any:
			v, ok := c[k]
			if !ok {
				return nil, fmt.Errorf("no %q", k)
			}
			d = v
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(c) {
				return nil, fmt.Errorf("bad index %q", k)
			}
			d = c[i]
		default:
			return nil, fmt.Errorf("no %q", k)
		}
	}
	return d, nil
}

// put sets (insert: adds) the value at path and returns the (possibly new) document.
func put(d any, path []string, v any, insert bool) (any, error) {
	if len(path) == 0 {
		return v, nil
	}
	k, rest := path[0], path[1:]
	switch c := d.(type) {
	case map[string]any:
		if len(rest) == 0 {
			c[k] = v
			return c, nil
		}
		child, ok := c[k]
		if !ok {
			return nil, fmt.Errorf("no %q", k)
		}
		nv, err := put(child, rest, v, insert)
		c[k] = nv
		return c, err
	case []any:
		i := len(c)
		if k != "-" {
			var err error
			if i, err = strconv.Atoi(k); err != nil || i < 0 || i > len(c) {
				return nil, fmt.Errorf("bad index %q", k)
			}
		}
		if len(rest) == 0 {
			if insert {
				c = append(c[:i], append([]any{v}, c[i:]...)...)
			} else if i < len(c) {
				c[i] = v
			} else {
				return nil, fmt.Errorf("bad index %q", k)
			}
			return c, nil
		}
		if i >= len(c) {
			return nil, fmt.Errorf("bad index %q", k)
		}
		nv, err := put(c[i], rest, v, insert)
		c[i] = nv
		return c, err
	}
	return nil, fmt.Errorf("no %q", k)
}

func remove(d any, path []string) (any, error) {
	if len(path) == 0 {
		return nil, fmt.Errorf("cannot remove the whole document")
	}
	k, rest := path[0], path[1:]
	switch c := d.(type) {
	case map[string]any:
		if len(rest) == 0 {
			if _, ok := c[k]; !ok {
				return nil, fmt.Errorf("no %q", k)
			}
			delete(c, k)
			return c, nil
		}
		nv, err := remove(c[k], rest)
		c[k] = nv
		return c, err
	case []any:
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 || i >= len(c) {
			return nil, fmt.Errorf("bad index %q", k)
		}
		if len(rest) == 0 {
			return append(c[:i], c[i+1:]...), nil
		}
		nv, err := remove(c[i], rest)
		c[i] = nv
		return c, err
	}
	return nil, fmt.Errorf("no %q", k)
}
