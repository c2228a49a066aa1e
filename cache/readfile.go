package cache

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ReadFile reads one cached object by the path it had in the old layout,
// <root>/<owner>/<resource>.<version>.<group>/[<namespace>/]<name>, from a cache another process
// may own (for tools and tests): the file itself when it is one, else the resource's log, read
// without taking the lock. A missing object is an fs.ErrNotExist *PathError.
func ReadFile(path string) (*Header, []byte, error) {
	if data, err := os.ReadFile(path); err == nil {
		dir := filepath.Base(filepath.Dir(path))
		if strings.Count(dir, ".") < 2 {
			dir = filepath.Base(filepath.Dir(filepath.Dir(path)))
		}
		resource, _, _ := strings.Cut(dir, ".")
		return decodeFile(data, resource)
	}
	notExist := &fs.PathError{Op: "read", Path: path, Err: fs.ErrNotExist}
	// Find the cache root: the nearest directory above holding the logs.
	parts := strings.Split(filepath.Clean(path), string(filepath.Separator))
	for i := len(parts) - 3; i >= 1; i-- {
		root := strings.Join(parts[:i], string(filepath.Separator))
		if root == "" {
			root = string(filepath.Separator)
		}
		if fi, err := os.Stat(filepath.Join(root, logDir)); err != nil || !fi.IsDir() {
			continue
		}
		rest := parts[i:]
		res, ver, group, ok := parseLogName(rest[1])
		if !ok || len(rest) < 3 || len(rest) > 4 {
			return nil, nil, notExist
		}
		k := Key{Resource: Resource{Owner: unescape(rest[0]), Group: group, Version: ver, Resource: res}, Name: unescape(rest[len(rest)-1])}
		if len(rest) == 4 {
			k.Namespace = unescape(rest[2])
		}
		s, err := open(root, nil, true)
		if err != nil {
			return nil, nil, err
		}
		defer s.Close()
		l := newRlog(s, logName(k.Resource))
		if err := l.open(); err != nil {
			return nil, nil, notExist
		}
		s.logs[l.name] = l
		h, body, err := s.Get(k)
		if errors.Is(err, ErrNotFound) {
			return nil, nil, notExist
		}
		return h, body, err
	}
	return nil, nil, notExist
}
