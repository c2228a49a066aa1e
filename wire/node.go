package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// NodeFacts are what nodehub reads of a Node to keep a condition of its own up to date (the
// Autonomy condition): one annotation, one label and one condition's status, read from the raw
// bytes (JSON or the protobuf envelope) without decoding the object.
type NodeFacts struct {
	Annotation, Label, Condition          string
	HasAnnotation, HasLabel, HasCondition bool
}

// ReadNodeFacts reads the value of annotation and label and the status of the condition of type
// condition.
func ReadNodeFacts(raw []byte, annotation, label, condition string) (NodeFacts, error) {
	if IsProtobuf(raw) {
		return protoNodeFacts(raw, annotation, label, condition)
	}
	return jsonNodeFacts(raw, annotation, label, condition)
}

func protoNodeFacts(raw []byte, annotation, label, condition string) (NodeFacts, error) {
	var nf NodeFacts
	_, kind, obj, err := DecodeProtoEnvelope(raw)
	if err != nil {
		return nf, err
	}
	if kind != "Node" {
		return nf, fmt.Errorf("wire: a %s is not a Node", kind)
	}
	err = protoFields(obj, func(f field) bool {
		if f.typ != wireBytes {
			return true
		}
		switch f.num {
		case 1: // metadata: labels 11, annotations 12, map entries {key=1, value=2}
			err = protoFields(f.data, func(m field) bool {
				if m.typ != wireBytes || m.num != 11 && m.num != 12 {
					return true
				}
				k, v := protoPair(m.data)
				switch { // compared as bytes: only the values read are copied
				case m.num == 11 && string(k) == label:
					nf.Label, nf.HasLabel = string(v), true
				case m.num == 12 && string(k) == annotation:
					nf.Annotation, nf.HasAnnotation = string(v), true
				}
				return true
			})
		case 3: // status: conditions 4, each {type=1, status=2}
			err = protoFields(f.data, func(c field) bool {
				if c.typ == wireBytes && c.num == 4 {
					if t, st := protoPair(c.data); string(t) == condition {
						nf.Condition, nf.HasCondition = string(st), true
					}
				}
				return true
			})
		}
		return err == nil
	})
	if err != nil {
		return NodeFacts{}, fmt.Errorf("wire: node: %w", err)
	}
	return nf, nil
}

func jsonNodeFacts(raw []byte, annotation, label, condition string) (NodeFacts, error) {
	var nf NodeFacts
	if !json.Valid(raw) {
		return nf, fmt.Errorf("wire: malformed JSON")
	}
	if k, ok := jsonMember(raw, "kind"); !ok || string(k) != `"Node"` {
		return nf, fmt.Errorf("wire: not a Node")
	}
	if md, ok := jsonMember(raw, "metadata"); ok {
		if m, ok := jsonMember(md, "annotations"); ok {
			nf.Annotation, nf.HasAnnotation = jsonString(m, annotation)
		}
		if m, ok := jsonMember(md, "labels"); ok {
			nf.Label, nf.HasLabel = jsonString(m, label)
		}
	}
	st, ok := jsonMember(raw, "status")
	if !ok {
		return nf, nil
	}
	conds, ok := jsonMember(st, "conditions")
	if !ok {
		return nf, nil
	}
	err := jsonElements(conds, func(el []byte) {
		if t, _ := jsonString(el, "type"); t == condition {
			nf.Condition, _ = jsonString(el, "status")
			nf.HasCondition = true
		}
	})
	if err != nil {
		return NodeFacts{}, err
	}
	return nf, nil
}

// jsonString returns a string member of a JSON object.
func jsonString(obj []byte, key string) (string, bool) {
	v, ok := jsonMember(obj, key)
	if !ok || len(v) == 0 || v[0] != '"' {
		return "", false
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return "", false
	}
	return s, true
}

// jsonElements calls fn with each element of a JSON array.
func jsonElements(arr []byte, fn func(el []byte)) error {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		if i < len(arr) && bytes.HasPrefix(arr[i:], []byte("null")) {
			return nil
		}
		return fmt.Errorf("wire: not a JSON array")
	}
	i = skipSpace(arr, i+1)
	if i < len(arr) && arr[i] == ']' {
		return nil
	}
	for {
		e := skipValue(arr, i)
		if e < 0 {
			return fmt.Errorf("wire: malformed JSON array")
		}
		fn(arr[i:e])
		i = skipSpace(arr, e)
		if i >= len(arr) {
			return fmt.Errorf("wire: malformed JSON array")
		}
		if arr[i] == ']' {
			return nil
		}
		if arr[i] != ',' {
			return fmt.Errorf("wire: malformed JSON array")
		}
		i = skipSpace(arr, i+1)
	}
}
