package cache

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// ErrBadKey is returned for a key whose parts would not make a safe path.
var ErrBadKey = errors.New("cache: bad key")

// Resource names one resource of one cache owner: <owner>/<resource>.<version>.<group>.
type Resource struct {
	// Owner is whose cache this is: a component name, or component@credential for requests that
	// carried credentials of their own.
	Owner    string
	Group    string
	Version  string
	Resource string
}

// Dir is the resource's directory below the cache root.
func (r Resource) Dir() string {
	g := r.Group
	if g == "" {
		g = "core"
	}
	return filepath.Join(escape(r.Owner), r.Resource+"."+r.Version+"."+g)
}

// String is the resource as owner/resource.version.group.
func (r Resource) String() string { return filepath.ToSlash(r.Dir()) }

func (r Resource) validate() error {
	if r.Owner == "" || !isToken(r.Resource) || !isToken(r.Version) || (r.Group != "" && !isToken(r.Group)) {
		return fmt.Errorf("%w: resource %+v", ErrBadKey, r)
	}
	return nil
}

// Key names one object: a resource and the object's namespace ("" when cluster-scoped) and name.
type Key struct {
	Resource
	Namespace, Name string
}

// Path is the object's file below the cache root.
func (k Key) Path() string {
	if k.Namespace == "" {
		return filepath.Join(k.Dir(), escape(k.Name))
	}
	return filepath.Join(k.Dir(), escape(k.Namespace), escape(k.Name))
}

// ID is namespace/name, or name for a cluster-scoped object.
func (k Key) ID() string {
	if k.Namespace == "" {
		return k.Name
	}
	return k.Namespace + "/" + k.Name
}

func (k Key) validate() error {
	if err := k.Resource.validate(); err != nil {
		return err
	}
	if !isName(k.Name) || (k.Namespace != "" && !isName(k.Namespace)) {
		return fmt.Errorf("%w: object %q/%q", ErrBadKey, k.Namespace, k.Name)
	}
	return nil
}

// isToken accepts resource, version and group names: lower-case DNS-like tokens.
func isToken(s string) bool {
	if s == "" || len(s) > 253 || s[0] == '.' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// isName accepts any Kubernetes object name: a non-empty path segment that is not "." or "..".
func isName(s string) bool {
	return s != "" && s != "." && s != ".." && len(s) <= 253 && !strings.ContainsAny(s, "/\x00")
}

// escape makes a name safe as a file name that never starts with '.' (the cache's own files do)
// and never holds '/': '%' and a leading '.' are percent-escaped (Kubernetes names hold no '%').
func escape(s string) string {
	if !strings.ContainsRune(s, '%') && !strings.HasPrefix(s, ".") && !strings.ContainsAny(s, "/\x00") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' || c == '/' || c == 0 || (c == '.' && i == 0) {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// unescape reverses escape.
func unescape(s string) string {
	if !strings.ContainsRune(s, '%') {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if c, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(c))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
