// Package wire holds the Kubernetes wire formats every other nodehub package shares: what a request
// asks for (this file), content negotiation, Status errors and the protobuf envelope. It depends on no
// other nodehub package.
package wire

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// Verbs, as Kubernetes authorization names them, plus "proxy" for the proxy subresource and the
// legacy /proxy/ prefix.
const (
	VerbGet              = "get"
	VerbList             = "list"
	VerbWatch            = "watch"
	VerbCreate           = "create"
	VerbUpdate           = "update"
	VerbPatch            = "patch"
	VerbDelete           = "delete"
	VerbDeleteCollection = "deletecollection"
	VerbProxy            = "proxy"
)

// ErrBadRequest wraps every error ParseRequest returns; the hub answers such requests with 400.
var ErrBadRequest = errors.New("bad request")

// RequestInfo is what nodehub needs to know about one API request, read from its method, URL and
// headers without touching the body.
type RequestInfo struct {
	// IsResource is false for non-resource URLs such as /version, /healthz, /api, /apis/apps/v1.
	IsResource bool
	Path       string
	Verb       string

	Group, Version, Resource, Subresource string
	Namespace, Name                       string

	LabelSelector, FieldSelector string
	// ShardSelector is the shardSelector parameter (the apiserver's ShardedListAndWatch, alpha
	// since v1.36): a list or watch of one shard of the collection, never the whole of it.
	ShardSelector        string
	ResourceVersion      string
	ResourceVersionMatch string
	// TimeoutSeconds is the list/watch timeoutSeconds parameter; 0 when absent.
	TimeoutSeconds       int64
	Limit                int64
	Continue             string
	AllowWatchBookmarks  bool
	SendInitialEvents    bool
	HasSendInitialEvents bool

	// Component is the client's name: the User-Agent up to its first '/', lower-cased.
	Component string
	// Accept is the media type the client prefers for the answer.
	Accept MediaType
	// ContentType is the media type of the request body, if any.
	ContentType MediaType
}

// GVR names the resource as group/version/resource ("" group for the core API).
func (ri *RequestInfo) GVR() string {
	if ri.Group == "" {
		return ri.Version + "/" + ri.Resource
	}
	return ri.Group + "/" + ri.Version + "/" + ri.Resource
}

// namespaceSubresources are the paths below /namespaces/{name} that address the namespace itself.
var namespaceSubresources = map[string]bool{"status": true, "finalize": true}

// ParseRequest reads a request's RequestInfo. It fails (wrapping ErrBadRequest) only on a malformed
// query or an unparsable number; selectors are kept as text for whoever evaluates them.
func ParseRequest(r *http.Request) (*RequestInfo, error) {
	ri, err := ParseURL(r.Method, r.URL)
	if err != nil {
		return nil, err
	}
	ri.Component = ComponentOf(r.UserAgent())
	ri.Accept = NegotiateAccept(r.Header.Get("Accept"))
	if ct := r.Header.Get("Content-Type"); ct != "" {
		ri.ContentType = ParseMediaType(ct)
	}
	return ri, nil
}

// ParseURL reads the verb and resource coordinates from a method and URL. It follows the Kubernetes
// apiserver's own reading of paths: /api/v1/... for the core group, /apis/<group>/<version>/...
// otherwise, /watch/ and /proxy/ legacy prefixes, and namespaces/<ns>/<resource>/<name>/<subresource>.
func ParseURL(method string, u *url.URL) (*RequestInfo, error) {
	ri := &RequestInfo{Path: u.Path, Verb: strings.ToLower(method)}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("%w: query: %v", ErrBadRequest, err)
	}
	parts := splitPath(u.Path)
	if len(parts) < 3 || (parts[0] != "api" && parts[0] != "apis") {
		return ri, nil // /version, /healthz, /api, /api/v1 discovery and friends
	}
	for _, p := range parts {
		if p == "" {
			return nil, fmt.Errorf("%w: %s: empty path segment", ErrBadRequest, u.Path)
		}
	}
	if parts[0] == "api" {
		ri.Version, parts = parts[1], parts[2:]
	} else {
		if len(parts) < 4 {
			return ri, nil // /apis/<group>/<version> discovery
		}
		ri.Group, ri.Version, parts = parts[1], parts[2], parts[3:]
	}
	ri.IsResource = true

	legacy := ""
	if parts[0] == VerbWatch || parts[0] == VerbProxy {
		legacy, parts = parts[0], parts[1:]
		if len(parts) == 0 {
			return nil, fmt.Errorf("%w: %s: %s prefix without a resource", ErrBadRequest, u.Path, legacy)
		}
	}
	if parts[0] == "namespaces" && len(parts) > 1 {
		ri.Namespace = parts[1]
		if len(parts) > 2 && !namespaceSubresources[parts[2]] {
			parts = parts[2:]
		}
	}
	ri.Resource = parts[0]
	if len(parts) > 1 {
		ri.Name = parts[1]
	}
	if len(parts) > 2 {
		ri.Subresource = parts[2]
	}

	if err := ri.readQuery(q); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadRequest, u.Path, err)
	}
	ri.Verb = verbOf(ri.Verb, legacy, ri, q)
	if ri.Name == "" && (ri.Verb == VerbList || ri.Verb == VerbWatch) {
		// A list of one, as kubelet asks for its own Node: authorization and caching see the name.
		if name, ok := nameFromFieldSelector(ri.FieldSelector); ok {
			ri.Name = name
		}
	}
	return ri, nil
}

func verbOf(method, legacy string, ri *RequestInfo, q url.Values) string {
	switch {
	case legacy == VerbProxy || ri.Subresource == VerbProxy:
		return VerbProxy
	case legacy == VerbWatch:
		return VerbWatch
	}
	switch method {
	case "get", "head":
		if w := q.Get("watch"); w == "true" || w == "1" {
			return VerbWatch
		}
		if ri.Name == "" {
			return VerbList
		}
		return VerbGet
	case "post":
		return VerbCreate
	case "put":
		return VerbUpdate
	case "patch":
		return VerbPatch
	case "delete":
		if ri.Name == "" {
			return VerbDeleteCollection
		}
		return VerbDelete
	}
	return method
}

// MaxSelectorBytes bounds a label or field selector: real ones are a few dozen bytes; a longer
// one is refused (400) before anyone parses or evaluates it.
const MaxSelectorBytes = 4096

func (ri *RequestInfo) readQuery(q url.Values) error {
	ri.LabelSelector = q.Get("labelSelector")
	ri.FieldSelector = q.Get("fieldSelector")
	ri.ShardSelector = q.Get("shardSelector")
	for _, sel := range []struct{ name, v string }{{"labelSelector", ri.LabelSelector}, {"fieldSelector", ri.FieldSelector}, {"shardSelector", ri.ShardSelector}} {
		if len(sel.v) > MaxSelectorBytes {
			return fmt.Errorf("%s is %d bytes long; at most %d are accepted", sel.name, len(sel.v), MaxSelectorBytes)
		}
	}
	ri.ResourceVersion = q.Get("resourceVersion")
	ri.ResourceVersionMatch = q.Get("resourceVersionMatch")
	ri.Continue = q.Get("continue")
	var err error
	if ri.TimeoutSeconds, err = intParam(q, "timeoutSeconds"); err != nil {
		return err
	}
	if ri.Limit, err = intParam(q, "limit"); err != nil {
		return err
	}
	if ri.AllowWatchBookmarks, _, err = boolParam(q, "allowWatchBookmarks"); err != nil {
		return err
	}
	ri.SendInitialEvents, ri.HasSendInitialEvents, err = boolParam(q, "sendInitialEvents")
	return err
}

func intParam(q url.Values, key string) (int64, error) {
	s := q.Get(key)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q is not a non-negative integer", key, s)
	}
	return n, nil
}

func boolParam(q url.Values, key string) (v, present bool, err error) {
	s, ok := q[key]
	if !ok || len(s) == 0 || s[0] == "" {
		return false, ok, nil
	}
	v, err = strconv.ParseBool(s[0])
	if err != nil {
		return false, true, fmt.Errorf("%s=%q is not a boolean", key, s[0])
	}
	return v, true, nil
}

// nameFromFieldSelector returns X for a field selector that is exactly metadata.name=X (or ==X).
func nameFromFieldSelector(sel string) (string, bool) {
	if sel == "" || strings.Contains(sel, ",") {
		return "", false
	}
	for _, op := range []string{"==", "="} {
		if k, v, ok := strings.Cut(sel, op); ok && strings.TrimSpace(k) == "metadata.name" && !strings.HasSuffix(k, "!") {
			return strings.TrimSpace(v), strings.TrimSpace(v) != ""
		}
	}
	return "", false
}

func splitPath(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// ComponentOf returns the client component named by a User-Agent: the text before the first '/',
// lower-cased and trimmed ("kubelet/v1.34.4 (linux/arm64) kubernetes/abc" is "kubelet").
func ComponentOf(userAgent string) string {
	c, _, _ := strings.Cut(userAgent, "/")
	return strings.ToLower(strings.TrimSpace(c))
}
