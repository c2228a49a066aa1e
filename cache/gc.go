package cache

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"time"
)

// DropOwner removes a component's whole cache: its own directory and those of its requests that
// carried their own credentials (component@…). It returns how many directories went.
func (s *Store) DropOwner(component string) (int, error) {
	if component == "" || strings.ContainsAny(component, "/@") {
		return 0, ErrBadKey
	}
	entries, err := fs.ReadDir(s.root.FS(), ".")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() && (name == escape(component) || strings.HasPrefix(name, escape(component)+"@")) {
			if err := s.removeAll(name); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

// RemoveOlder removes the cached objects of a resource (every owner, every version and group) not
// written for longer than age. It returns how many went.
func (s *Store) RemoveOlder(resource string, age time.Duration, now time.Time) (int, error) {
	owners, err := fs.ReadDir(s.root.FS(), ".")
	if err != nil {
		return 0, err
	}
	n := 0
	for _, o := range owners {
		if !o.IsDir() || strings.HasPrefix(o.Name(), ".") {
			continue
		}
		dirs, _ := fs.ReadDir(s.root.FS(), o.Name())
		for _, d := range dirs {
			if !d.IsDir() || !strings.HasPrefix(d.Name(), resource+".") {
				continue
			}
			base := o.Name() + "/" + d.Name()
			err := fs.WalkDir(s.root.FS(), base, func(p string, e fs.DirEntry, err error) error {
				if err != nil {
					return nil
				}
				if e.IsDir() {
					if p != base && strings.HasPrefix(e.Name(), ".") {
						return fs.SkipDir // list records
					}
					return nil
				}
				if strings.HasPrefix(e.Name(), ".") {
					return nil
				}
				if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > age {
					if s.root.Remove(filepath.FromSlash(p)) == nil {
						n++
					}
				}
				return nil
			})
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return n, err
			}
		}
	}
	if n > 0 {
		s.dirty.Store(true)
		s.recount()
	}
	return n, nil
}

// AgeOut removes the caches of owners none of whose files was written for longer than unused.
func (s *Store) AgeOut(unused time.Duration, now time.Time) ([]string, error) {
	owners, err := fs.ReadDir(s.root.FS(), ".")
	if err != nil {
		return nil, err
	}
	var gone []string
	for _, o := range owners {
		if !o.IsDir() || strings.HasPrefix(o.Name(), ".") {
			continue
		}
		var newest time.Time
		_ = fs.WalkDir(s.root.FS(), o.Name(), func(p string, e fs.DirEntry, err error) error {
			if err == nil {
				if info, err := e.Info(); err == nil && info.ModTime().After(newest) {
					newest = info.ModTime()
				}
			}
			return nil
		})
		if now.Sub(newest) > unused {
			if err := s.removeAll(o.Name()); err != nil {
				return gone, err
			}
			gone = append(gone, unescape(o.Name()))
		}
	}
	return gone, nil
}
