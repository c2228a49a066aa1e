package certs

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// parseYAML reads the YAML a kubeconfig is written in — block mappings and sequences, plain and
// quoted scalars, comments, flow collections — or JSON, into maps, slices and strings. It
// is not a general YAML parser: anchors and multi-line scalars are refused with an error. (A full YAML library would cost the binary a quarter of a megabyte to
// read one small file.)
func parseYAML(data []byte) (any, error) {
	text := strings.TrimSpace(string(data))
	if strings.HasPrefix(text, "{") {
		var v any
		err := json.Unmarshal([]byte(text), &v)
		return v, err
	}
	var lines []yline
	for n, raw := range strings.Split(string(data), "\n") {
		raw = strings.TrimRight(raw, " \t\r")
		body := strings.TrimLeft(raw, " ")
		if strings.HasPrefix(body, "\t") {
			return nil, fmt.Errorf("yaml line %d: tab indentation", n+1)
		}
		body = stripComment(body)
		if body == "" || body == "---" || body == "..." {
			continue
		}
		lines = append(lines, yline{n: n + 1, indent: len(raw) - len(strings.TrimLeft(raw, " ")), text: body})
	}
	if len(lines) == 0 {
		return map[string]any{}, nil
	}
	v, next, err := parseBlock(lines, 0, lines[0].indent)
	if err == nil && next < len(lines) {
		err = fmt.Errorf("yaml line %d: unexpected indentation", lines[next].n)
	}
	return v, err
}

type yline struct {
	n, indent int
	text      string
}

func stripComment(s string) string {
	inS, inD := false, false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\'' && !inD:
			inS = !inS
		case c == '"' && !inS && (i == 0 || s[i-1] != '\\'):
			inD = !inD
		case c == '#' && !inS && !inD && (i == 0 || s[i-1] == ' '):
			return strings.TrimRight(s[:i], " ")
		}
	}
	return s
}

func isItem(l yline) bool { return l.text == "-" || strings.HasPrefix(l.text, "- ") }

func parseBlock(lines []yline, i, indent int) (any, int, error) {
	if isItem(lines[i]) {
		return parseSeq(lines, i, indent)
	}
	return parseMap(lines, i, indent)
}

func parseMap(lines []yline, i, indent int) (any, int, error) {
	m := map[string]any{}
	for i < len(lines) && lines[i].indent == indent && !isItem(lines[i]) {
		l := lines[i]
		key, rest, ok := splitKey(l.text)
		if !ok {
			return nil, i, fmt.Errorf("yaml line %d: want key: value", l.n)
		}
		i++
		if rest != "" {
			v, err := scalar(rest, l.n)
			if err != nil {
				return nil, i, err
			}
			m[key] = v
			continue
		}
		if i < len(lines) && (lines[i].indent > indent || lines[i].indent == indent && isItem(lines[i])) {
			v, next, err := parseBlock(lines, i, lines[i].indent)
			if err != nil {
				return nil, next, err
			}
			m[key], i = v, next
			continue
		}
		m[key] = nil
	}
	return m, i, nil
}

func parseSeq(lines []yline, i, indent int) (any, int, error) {
	var out []any
	for i < len(lines) && lines[i].indent == indent && isItem(lines[i]) {
		l := lines[i]
		rest := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
		if rest == "" {
			i++
			if i < len(lines) && lines[i].indent > indent {
				v, next, err := parseBlock(lines, i, lines[i].indent)
				if err != nil {
					return nil, next, err
				}
				out, i = append(out, v), next
			} else {
				out = append(out, nil)
			}
			continue
		}
		if _, _, ok := splitKey(rest); ok && !strings.HasPrefix(rest, "\"") && !strings.HasPrefix(rest, "'") {
			// "- key: value" opens a mapping whose keys line up with key.
			lines[i] = yline{n: l.n, indent: indent + len(l.text) - len(rest), text: rest}
			v, next, err := parseMap(lines, i, lines[i].indent)
			if err != nil {
				return nil, next, err
			}
			out, i = append(out, v), next
			continue
		}
		v, err := scalar(rest, l.n)
		if err != nil {
			return nil, i, err
		}
		out = append(out, v)
		i++
	}
	return out, i, nil
}

// splitKey splits "key: value" (or "key:"); the key may be quoted.
func splitKey(s string) (string, string, bool) {
	if strings.HasPrefix(s, "\"") || strings.HasPrefix(s, "'") {
		end := strings.Index(s[1:], s[:1])
		if end < 0 {
			return "", "", false
		}
		k := s[1 : end+1]
		rest := s[end+2:]
		if !strings.HasPrefix(rest, ":") {
			return "", "", false
		}
		return k, strings.TrimSpace(rest[1:]), true
	}
	if k, rest, ok := strings.Cut(s, ": "); ok {
		return strings.TrimSpace(k), strings.TrimSpace(rest), true
	}
	if strings.HasSuffix(s, ":") {
		return strings.TrimSpace(s[:len(s)-1]), "", true
	}
	return "", "", false
}

func scalar(s string, n int) (any, error) {
	switch {
	case s == "{}":
		return map[string]any{}, nil
	case s == "[]":
		return []any{}, nil
	case s == "null" || s == "~":
		return nil, nil
	case strings.HasPrefix(s, "\""):
		v, err := strconv.Unquote(s)
		if err != nil {
			return nil, fmt.Errorf("yaml line %d: %v", n, err)
		}
		return v, nil
	case strings.HasPrefix(s, "'"):
		if len(s) < 2 || !strings.HasSuffix(s, "'") {
			return nil, fmt.Errorf("yaml line %d: unterminated quote", n)
		}
		return strings.ReplaceAll(s[1:len(s)-1], "''", "'"), nil
	case strings.HasPrefix(s, "{") || strings.HasPrefix(s, "["):
		v, rest, err := flow(s)
		if err == nil && strings.TrimSpace(rest) != "" {
			err = fmt.Errorf("trailing %q", rest)
		}
		if err != nil {
			return nil, fmt.Errorf("yaml line %d: %v", n, err)
		}
		return v, nil
	case strings.HasPrefix(s, "&") || strings.HasPrefix(s, "*") || strings.HasPrefix(s, "|") || strings.HasPrefix(s, ">"):
		return nil, fmt.Errorf("yaml line %d: %q is beyond the YAML nodehub reads (anchors, block scalars)", n, s)
	}
	return s, nil
}

// flow reads one flow collection or scalar ({k: v, …}, [a, …], "q", 'q', plain) from the start of s.
func flow(s string) (any, string, error) {
	s = strings.TrimLeft(s, " ")
	switch {
	case strings.HasPrefix(s, "{"):
		return flowMap(s)
	case strings.HasPrefix(s, "["):
		return flowSeq(s)
	case strings.HasPrefix(s, "\""):
		return flowDoubleQuoted(s)
	case strings.HasPrefix(s, "'"):
		return flowSingleQuoted(s)
	}
	return flowPlain(s)
}

// flowMap reads a flow mapping ({k: v, …}) from the start of s.
func flowMap(s string) (any, string, error) {
	m := map[string]any{}
	s = strings.TrimLeft(s[1:], " ")
	for !strings.HasPrefix(s, "}") {
		k, rest, err := flow(s)
		if err != nil {
			return nil, "", err
		}
		ks, ok := k.(string)
		rest = strings.TrimLeft(rest, " ")
		if !ok || !strings.HasPrefix(rest, ":") {
			return nil, "", fmt.Errorf("want key: value in %q", s)
		}
		v, rest, err := flow(rest[1:])
		if err != nil {
			return nil, "", err
		}
		m[ks] = v
		if s, err = flowNext(rest, "{", "}"); err != nil {
			return nil, "", err
		}
	}
	return m, s[1:], nil
}

// flowSeq reads a flow sequence ([a, …]) from the start of s.
func flowSeq(s string) (any, string, error) {
	out := []any{}
	s = strings.TrimLeft(s[1:], " ")
	for !strings.HasPrefix(s, "]") {
		v, rest, err := flow(s)
		if err != nil {
			return nil, "", err
		}
		out = append(out, v)
		if s, err = flowNext(rest, "[", "]"); err != nil {
			return nil, "", err
		}
	}
	return out, s[1:], nil
}

// flowNext skips what follows an entry of a flow collection (open … close): a comma and the
// spaces after it, or nothing before its closing bracket; anything else is an error.
func flowNext(rest, open, close string) (string, error) {
	s := strings.TrimLeft(rest, " ")
	if strings.HasPrefix(s, ",") {
		return strings.TrimLeft(s[1:], " "), nil
	}
	if !strings.HasPrefix(s, close) {
		return "", fmt.Errorf("unterminated %s", open)
	}
	return s, nil
}

// flowDoubleQuoted reads a "quoted" scalar, its escapes Go's, from the start of s.
func flowDoubleQuoted(s string) (any, string, error) {
	for i := 1; i < len(s); i++ {
		if s[i] == '\\' {
			i++
		} else if s[i] == '"' {
			v, err := strconv.Unquote(s[:i+1])
			return v, s[i+1:], err
		}
	}
	return nil, "", fmt.Errorf("unterminated quote")
}

// flowSingleQuoted reads a 'quoted' scalar (” is a quote) from the start of s.
func flowSingleQuoted(s string) (any, string, error) {
	for i := 1; i < len(s); i++ {
		if s[i] == '\'' {
			if i+1 < len(s) && s[i+1] == '\'' {
				i++
				continue
			}
			return strings.ReplaceAll(s[1:i], "''", "'"), s[i+1:], nil
		}
	}
	return nil, "", fmt.Errorf("unterminated quote")
}

// flowPlain reads a plain scalar, up to the flow's next separator, from the start of s.
func flowPlain(s string) (any, string, error) {
	end := strings.IndexAny(s, ",:}]")
	for end >= 0 && s[end] == ':' && end+1 < len(s) && s[end+1] != ' ' { // a colon inside a plain scalar (a URL)
		next := strings.IndexAny(s[end+1:], ",:}]")
		if next < 0 {
			end = -1
			break
		}
		end += 1 + next
	}
	if end < 0 {
		end = len(s)
	}
	v := strings.TrimSpace(s[:end])
	if v == "null" || v == "~" {
		return nil, s[end:], nil
	}
	return v, s[end:], nil
}

// yamlToJSON turns a kubeconfig into JSON for encoding/json.
func yamlToJSON(data []byte) ([]byte, error) {
	v, err := parseYAML(data)
	if err != nil {
		return nil, err
	}
	return json.Marshal(v)
}
