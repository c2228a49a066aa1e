package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"nodehub/wire"
)

// applyPatch applies a JSON merge patch, strategic merge patch (built-in kinds) or JSON patch to a
// cached object and returns the result in the object's stored format. Every kind's work is
// bounded as the document grows (patchWork), and the result grows by at most maxGrowth.
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
	if len(out) > len(js)+maxGrowth {
		return nil, &statusError{http.StatusRequestEntityTooLarge, fmt.Sprintf("nodehub: the patch makes the object grow by more than %d bytes", maxGrowth)}
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

// The bounds of a patch's work, whatever its kind: what a patch may make of a document offline is
// bounded by what it costs as the document grows, not only by the size of the result.
const (
	// maxPatchOps is the apiserver's bound on the operations of a JSON patch (413 past it).
	maxPatchOps = 10000
	// maxCopyBytes is the apiserver's default --json-patch-max-copy-bytes: what the copy
	// operations of one JSON patch may copy together (422 past it).
	maxCopyBytes = 3 << 20
	// maxGrowth is what a patch may add to a document: what a request body may carry (413 past it).
	maxGrowth = maxBody
	// maxPatchWork is the work (bytes or elements visited, moved or compared) one patch may take
	// (422 past it): legitimate patches touch a few fields; a patch that re-reads, re-inserts or
	// re-compares big parts of a document thousands of times is refused long before it costs a
	// second.
	maxPatchWork = 64 << 20
)

// patchWork counts what one patch spends.
type patchWork struct {
	work, grown, copied int64
}

func (w *patchWork) spend(n int) error {
	if w.work += int64(n); w.work > maxPatchWork {
		return &statusError{http.StatusUnprocessableEntity, fmt.Sprintf("nodehub: the patch takes more than %d units of work", maxPatchWork)}
	}
	return nil
}

func (w *patchWork) grow(n int) error {
	if w.grown += int64(n); w.grown > maxGrowth {
		return &statusError{http.StatusRequestEntityTooLarge, fmt.Sprintf("nodehub: the patch makes the object grow by more than %d bytes", maxGrowth)}
	}
	return nil
}

func (w *patchWork) copy(n int) error {
	if w.copied += int64(n); w.copied > maxCopyBytes {
		return &statusError{http.StatusUnprocessableEntity, fmt.Sprintf("nodehub: unable to copy, would exceed max accumulated copy size limit of %d", maxCopyBytes)}
	}
	return w.grow(n)
}

// sizeOf is about the JSON size of v, and the work of finding it; it stops counting past limit.
func sizeOf(v any, limit int) (size, work int) {
	var walk func(v any)
	walk = func(v any) {
		work++
		if size > limit {
			return
		}
		switch c := v.(type) {
		case map[string]any:
			size += 2
			for k, e := range c {
				size += len(k) + 4
				walk(e)
			}
		case []any:
			size += 2
			for _, e := range c {
				size++
				walk(e)
			}
		case string:
			size += len(c) + 2
		default:
			size += 8
		}
	}
	walk(v)
	return size, work
}

// deepCopy copies maps and lists, so a value copied by a JSON patch is a value of its own (RFC 6902
// copy): a later change of one place does not change the other, and no document can hold itself.
func deepCopy(v any) any {
	switch c := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(c))
		for k, e := range c {
			m[k] = deepCopy(e)
		}
		return m
	case []any:
		l := make([]any, len(c))
		for i, e := range c {
			l[i] = deepCopy(e)
		}
		return l
	}
	return v
}

// jsonPatchOp is one operation of an RFC 6902 JSON patch (an alias: a patch that is no list of
// them is refused naming the struct itself, as it always was).
type jsonPatchOp = struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	From  string          `json:"from"`
	Value json.RawMessage `json:"value"`
}

// jsonPatch applies an RFC 6902 JSON patch.
func jsonPatch(doc, patch []byte) ([]byte, error) {
	var d any
	if err := json.Unmarshal(doc, &d); err != nil {
		return nil, err
	}
	var ops []jsonPatchOp
	if err := json.Unmarshal(patch, &ops); err != nil {
		return nil, fmt.Errorf("json patch: %w", err)
	}
	if len(ops) > maxPatchOps {
		return nil, &statusError{http.StatusRequestEntityTooLarge, fmt.Sprintf("nodehub: the allowed maximum operations in a JSON patch is %d, got %d", maxPatchOps, len(ops))}
	}
	w := &patchWork{}
	for _, op := range ops {
		var v any
		if len(op.Value) > 0 {
			if err := json.Unmarshal(op.Value, &v); err != nil {
				return nil, fmt.Errorf("json patch %s %s: %w", op.Op, op.Path, err)
			}
		}
		var err error
		if d, err = applyOp(d, op, v, w); err != nil {
			var se *statusError
			if errors.As(err, &se) {
				return nil, err
			}
			return nil, fmt.Errorf("json patch: %w", err)
		}
	}
	return json.Marshal(d)
}

// applyOp applies one operation (its value decoded, v) to d, its work counted in w.
func applyOp(d any, op jsonPatchOp, v any, w *patchWork) (any, error) {
	if err := w.spend(len(op.Path) + len(op.From) + len(op.Value) + 1); err != nil {
		return d, err
	}
	switch op.Op {
	case "add":
		if err := w.grow(len(op.Value)); err != nil {
			return d, err
		}
		return put(d, pointer(op.Path), v, true, w)
	case "replace":
		if _, err := get(d, pointer(op.Path), w); err != nil {
			return d, err
		}
		if err := w.grow(len(op.Value)); err != nil {
			return d, err
		}
		return put(d, pointer(op.Path), v, false, w)
	case "remove":
		return remove(d, pointer(op.Path), w)
	case "test":
		return d, testOp(d, op.Path, v, w)
	case "move", "copy":
		return moveOrCopy(d, op, w)
	}
	return d, fmt.Errorf("unknown op %q", op.Op)
}

// testOp fails unless the value at path is v.
func testOp(d any, path string, v any, w *patchWork) error {
	cur, err := get(d, pointer(path), w)
	if err != nil {
		return err
	}
	n, work := sizeOf(cur, maxPatchWork)
	if err := w.spend(work + n); err != nil { // the walk, and marshalling what it found
		return err
	}
	a, _ := json.Marshal(cur)
	b, _ := json.Marshal(v)
	if string(a) != string(b) {
		return fmt.Errorf("test failed at %s", path)
	}
	return nil
}

// moveOrCopy puts the value at op.From at op.Path: moved (removed from op.From, never into
// itself) or copied (a deep copy, its size bounded).
func moveOrCopy(d any, op jsonPatchOp, w *patchWork) (any, error) {
	cur, err := get(d, pointer(op.From), w)
	if err != nil {
		return d, err
	}
	if op.Op == "move" {
		if strings.HasPrefix(op.Path+"/", op.From+"/") && op.Path != op.From {
			return d, fmt.Errorf("cannot move %s into itself", op.From)
		}
		if d, err = remove(d, pointer(op.From), w); err != nil {
			return d, err
		}
	} else {
		n, work := sizeOf(cur, maxCopyBytes+1)
		if err := w.spend(2 * work); err != nil {
			return d, err
		}
		if err := w.copy(n); err != nil {
			return d, err
		}
		cur = deepCopy(cur)
	}
	return put(d, pointer(op.Path), cur, true, w)
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

func get(d any, path []string, w *patchWork) (any, error) {
	if err := w.spend(len(path)); err != nil {
		return nil, err
	}
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
func put(d any, path []string, v any, insert bool, w *patchWork) (any, error) {
	if err := w.spend(1); err != nil {
		return nil, err
	}
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
		nv, err := put(child, rest, v, insert, w)
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
				if err := w.spend(len(c) - i); err != nil { // the elements moved
					return nil, err
				}
				c = slices.Insert(c, i, v)
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
		nv, err := put(c[i], rest, v, insert, w)
		c[i] = nv
		return c, err
	}
	return nil, fmt.Errorf("no %q", k)
}

func remove(d any, path []string, w *patchWork) (any, error) {
	if err := w.spend(1); err != nil {
		return nil, err
	}
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
		nv, err := remove(c[k], rest, w)
		c[k] = nv
		return c, err
	case []any:
		i, err := strconv.Atoi(k)
		if err != nil || i < 0 || i >= len(c) {
			return nil, fmt.Errorf("bad index %q", k)
		}
		if len(rest) == 0 {
			if err := w.spend(len(c) - i); err != nil { // the elements moved
				return nil, err
			}
			return slices.Delete(c, i, i+1), nil
		}
		nv, err := remove(c[i], rest, w)
		c[i] = nv
		return c, err
	}
	return nil, fmt.Errorf("no %q", k)
}
