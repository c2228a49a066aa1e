package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Meta is what nodehub needs to know about one object, read from its raw bytes without decoding
// the whole object into a Go type.
type Meta struct {
	APIVersion, Kind string
	Namespace, Name  string
	UID              string
	ResourceVersion  string
	Labels           map[string]string
	// Fields holds the values of the field-selector fields Kubernetes defines for the resource
	// (spec.nodeName and status.phase for pods, …), absent ones as their zero value. Every object
	// also answers metadata.name and metadata.namespace.
	Fields map[string]string
}

// selectable is one field a field selector may name, with where it is in protobuf.
type selectable struct {
	path  string
	proto []int
	kind  byte // 's' string, 'b' bool, 'i' integer
}

// selectableFields are the field-selector fields of built-in resources beyond metadata.name and
// metadata.namespace (the apiserver's own per-resource field sets), by resource name. Custom
// resources are JSON only; their other fields are looked up in the object itself (FieldValue).
var selectableFields = map[string][]selectable{
	"pods": {
		{"spec.nodeName", []int{2, 10}, 's'}, {"spec.restartPolicy", []int{2, 3}, 's'},
		{"spec.schedulerName", []int{2, 19}, 's'}, {"spec.serviceAccountName", []int{2, 8}, 's'},
		{"spec.hostNetwork", []int{2, 11}, 'b'}, {"status.phase", []int{3, 1}, 's'},
		{"status.podIP", []int{3, 6}, 's'}, {"status.nominatedNodeName", []int{3, 11}, 's'},
	},
	"nodes": {{"spec.unschedulable", []int{2, 4}, 'b'}},
	"events": {
		{"involvedObject.kind", []int{2, 1}, 's'}, {"involvedObject.namespace", []int{2, 2}, 's'},
		{"involvedObject.name", []int{2, 3}, 's'}, {"involvedObject.uid", []int{2, 4}, 's'},
		{"involvedObject.apiVersion", []int{2, 5}, 's'}, {"involvedObject.resourceVersion", []int{2, 6}, 's'},
		{"involvedObject.fieldPath", []int{2, 7}, 's'}, {"reason", []int{3}, 's'},
		{"reportingComponent", []int{14}, 's'}, {"source", []int{5, 1}, 's'}, {"type", []int{9}, 's'},
	},
	"secrets":                {{"type", []int{3}, 's'}},
	"services":               {{"spec.clusterIP", []int{2, 3}, 's'}, {"spec.type", []int{2, 4}, 's'}},
	"namespaces":             {{"status.phase", []int{3, 1}, 's'}},
	"replicationcontrollers": {{"status.replicas", []int{3, 1}, 'i'}},
}

// jsonPaths are where selectable fields live in JSON when it differs from the field name.
var jsonPaths = map[string]string{"source": "source.component"}

// ExtractMeta reads an object's metadata (and its resource's selectable fields) from its raw
// bytes, JSON or the protobuf envelope.
func ExtractMeta(raw []byte, resource string) (Meta, error) {
	if IsProtobuf(raw) {
		return protoMeta(raw, resource)
	}
	return jsonMeta(raw, resource)
}

// Version is what tells one copy of an object from another: its namespace, name and
// resourceVersion.
type Version struct{ Namespace, Name, ResourceVersion string }

// VersionOf reads an object's namespace, name and resourceVersion from its raw bytes (JSON or the
// protobuf envelope) and nothing else: whether a copy is newer than the one kept is a compare, not
// a decode (ExtractMeta reads all an index needs). false when the object has no metadata.
func VersionOf(raw []byte) (Version, bool) {
	var v Version
	if IsProtobuf(raw) {
		_, _, obj, err := DecodeProtoEnvelope(raw)
		if err != nil {
			return v, false
		}
		om, ok := protoLookup(obj, []int{1})
		if !ok || om.typ != wireBytes {
			return v, false
		}
		err = protoFields(om.data, func(f field) bool {
			if f.typ == wireBytes {
				switch f.num {
				case 1:
					v.Name = string(f.data)
				case 3:
					v.Namespace = string(f.data)
				case 6:
					v.ResourceVersion = string(f.data)
				}
			}
			return true
		})
		return v, err == nil
	}
	md, ok := jsonMember(raw, "metadata")
	if !ok {
		return v, false
	}
	v.Name, _ = jsonString(md, "name")
	v.Namespace, _ = jsonString(md, "namespace")
	v.ResourceVersion, _ = jsonString(md, "resourceVersion")
	return v, true
}

// ListResourceVersionOf reads a list's resourceVersion (its metadata's) from its raw bytes, JSON
// or the protobuf envelope, without splitting its items.
func ListResourceVersionOf(raw []byte) (string, bool) {
	if IsProtobuf(raw) {
		_, _, obj, err := DecodeProtoEnvelope(raw)
		if err != nil {
			return "", false
		}
		return protoPath(obj, []int{1, 2}, false) // ListMeta{selfLink=1, resourceVersion=2}
	}
	md, ok := jsonMember(raw, "metadata")
	if !ok {
		return "", false
	}
	return jsonString(md, "resourceVersion")
}

func jsonMeta(raw []byte, resource string) (Meta, error) {
	var md struct {
		Name            string            `json:"name"`
		Namespace       string            `json:"namespace"`
		UID             string            `json:"uid"`
		ResourceVersion string            `json:"resourceVersion"`
		Labels          map[string]string `json:"labels"`
	}
	var m Meta
	// Only the members read are decoded; the rest of the object is skipped over as bytes.
	if b, ok := jsonMember(raw, "metadata"); ok {
		if err := json.Unmarshal(b, &md); err != nil {
			return Meta{}, fmt.Errorf("wire: object metadata: %w", err)
		}
	} else if !json.Valid(raw) {
		return Meta{}, fmt.Errorf("wire: object metadata: not a JSON object")
	}
	if b, ok := jsonMember(raw, "apiVersion"); ok {
		_ = json.Unmarshal(b, &m.APIVersion)
	}
	if b, ok := jsonMember(raw, "kind"); ok {
		_ = json.Unmarshal(b, &m.Kind)
	}
	m.Name, m.Namespace, m.UID, m.ResourceVersion, m.Labels = md.Name, md.Namespace, md.UID, md.ResourceVersion, md.Labels
	if sel := selectableFields[resource]; len(sel) > 0 {
		m.Fields = make(map[string]string, len(sel))
		for _, f := range sel {
			path := f.path
			if p, ok := jsonPaths[path]; ok {
				path = p
			}
			v, _ := JSONField(raw, path)
			m.Fields[f.path] = zeroDefault(v, f.kind)
		}
	}
	return m, nil
}

func protoMeta(raw []byte, resource string) (Meta, error) {
	av, kind, obj, err := DecodeProtoEnvelope(raw)
	if err != nil {
		return Meta{}, err
	}
	m := Meta{APIVersion: av, Kind: kind}
	om, ok := protoLookup(obj, []int{1})
	if !ok || om.typ != wireBytes {
		return Meta{}, fmt.Errorf("wire: %s without metadata", kind)
	}
	err = protoFields(om.data, func(f field) bool {
		if f.typ != wireBytes {
			return true
		}
		switch f.num {
		case 1:
			m.Name = string(f.data)
		case 3:
			m.Namespace = string(f.data)
		case 5:
			m.UID = string(f.data)
		case 6:
			m.ResourceVersion = string(f.data)
		case 11: // labels: map entry {key=1, value=2}
			k, _ := protoPath(f.data, []int{1}, false)
			v, _ := protoPath(f.data, []int{2}, false)
			if m.Labels == nil {
				m.Labels = map[string]string{}
			}
			m.Labels[k] = v
		}
		return true
	})
	if err != nil {
		return Meta{}, fmt.Errorf("wire: %s metadata: %w", kind, err)
	}
	if sel := selectableFields[resource]; len(sel) > 0 {
		m.Fields = make(map[string]string, len(sel))
		for _, f := range sel {
			v, _ := protoPath(obj, f.proto, f.kind == 'b')
			m.Fields[f.path] = zeroDefault(v, f.kind)
		}
	}
	return m, nil
}

func zeroDefault(v string, kind byte) string {
	if v != "" {
		return v
	}
	switch kind {
	case 'b':
		return "false"
	case 'i':
		return "0"
	}
	return ""
}

// FieldValue returns the value a field selector compares for path: metadata.name and
// metadata.namespace, the resource's selectable fields, or (JSON objects only) any scalar at that
// dotted path, as custom resources' selectableFields allow.
func (m Meta) FieldValue(path string, raw []byte) (string, bool) {
	switch path {
	case "metadata.name":
		return m.Name, true
	case "metadata.namespace":
		return m.Namespace, true
	}
	if v, ok := m.Fields[path]; ok {
		return v, true
	}
	if len(raw) > 0 && raw[0] == '{' {
		return JSONField(raw, path)
	}
	return "", false
}

// JSONField returns the scalar at a dotted path of a JSON object: strings unquoted, numbers and
// booleans as written.
func JSONField(raw []byte, path string) (string, bool) {
	cur := raw
	for _, key := range strings.Split(path, ".") {
		v, ok := jsonMember(cur, key)
		if !ok {
			return "", false
		}
		cur = v
	}
	cur = bytes.TrimSpace(cur)
	if len(cur) == 0 || cur[0] == '{' || cur[0] == '[' || string(cur) == "null" {
		return "", false
	}
	if cur[0] == '"' {
		s, err := strconv.Unquote(string(cur))
		if err != nil {
			var u string
			if json.Unmarshal(cur, &u) != nil {
				return "", false
			}
			s = u
		}
		return s, true
	}
	return string(cur), true
}
