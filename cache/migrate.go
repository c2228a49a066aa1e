package cache

import (
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// The layout before the logs (nodehub's first, and YurtHub's): one file per object,
//
//	<root>/<owner>/<resource>.<version>.<group>/<namespace>/<name>
//	<root>/<owner>/<resource>.<version>.<group>/<name>
//	<root>/<owner>/<resource>.<version>.<group>/.lists/<id>   (nodehub: each list's record)
//
// holding a nodehub cache file (file.go) or, for YurtHub, the object's JSON. Found at start, it is
// appended to the logs, made durable, and removed.

// migrate brings every old-layout owner directory into the logs.
func (s *Store) migrate() {
	owners, err := fs.ReadDir(s.root.FS(), ".")
	if err != nil {
		return
	}
	for _, o := range owners {
		if !o.IsDir() || strings.HasPrefix(o.Name(), ".") {
			continue
		}
		owner := unescape(o.Name())
		dirs, _ := fs.ReadDir(s.root.FS(), o.Name())
		done := true
		objects, lists := 0, 0
		for _, d := range dirs {
			res, ver, group, ok := parseLogName(d.Name())
			if !d.IsDir() || !ok {
				continue
			}
			r := Resource{Owner: owner, Group: group, Version: ver, Resource: res}
			if r.validate() != nil {
				continue
			}
			n, m, err := s.migrateResource(r, filepath.Join(o.Name(), d.Name()))
			objects, lists = objects+n, lists+m
			if err != nil {
				s.log.Warn("cache: could not bring an old cache directory into the logs; it stays", "dir", filepath.Join(o.Name(), d.Name()), "err", err)
				done = false
			}
		}
		if objects+lists > 0 {
			s.log.Info("cache: brought an old cache directory into the logs", "owner", owner, "objects", objects, "lists", lists)
		}
		if done {
			if err := s.Sync(); err != nil {
				continue
			}
			_ = s.root.RemoveAll(o.Name())
		}
	}
}

func (s *Store) migrateResource(r Resource, rel string) (objects, lists int, err error) {
	lost := false
	err = s.eachLegacyObject(rel, func(ns, name string, data []byte) error {
		h, body, derr := decodeFile(data, r.Resource)
		if derr != nil {
			lost = true
			return nil
		}
		if h.Name == "" {
			h.Name = name
		}
		k := Key{Resource: r, Namespace: ns, Name: name}
		if k.validate() != nil {
			return nil
		}
		if perr := s.Put(k, h, body); perr != nil {
			return perr
		}
		objects++
		return nil
	})
	if err != nil {
		return objects, lists, err
	}
	entries, _ := fs.ReadDir(s.root.FS(), filepath.ToSlash(filepath.Join(rel, ".lists")))
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), tmpPrefix) {
			continue
		}
		data, rerr := s.root.ReadFile(filepath.Join(rel, ".lists", e.Name()))
		var rec ListRecord
		if rerr != nil || json.Unmarshal(data, &rec) != nil {
			continue
		}
		if lost {
			rec.Complete = false // an object of it was unreadable
		}
		if err := s.PutList(r, rec); err != nil {
			return objects, lists, err
		}
		lists++
	}
	return objects, lists, nil
}

// eachLegacyObject reads every object file of an old resource directory.
func (s *Store) eachLegacyObject(base string, fn func(ns, name string, data []byte) error) error {
	return s.scanDir(base, func(name string, data []byte, isDir bool) error {
		if !isDir {
			return fn("", unescape(name), data) // a cluster-scoped object
		}
		ns := unescape(name)
		return s.scanDir(filepath.Join(base, name), func(name string, data []byte, isDir bool) error {
			if isDir {
				return nil
			}
			return fn(ns, unescape(name), data)
		})
	})
}

// scanDir calls fn for each entry of a directory below the root that is not the cache's own, in
// name order, with the file's bytes (nil for a directory).
func (s *Store) scanDir(rel string, fn func(name string, data []byte, isDir bool) error) error {
	d, err := s.root.Open(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return err
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	dfd := int(d.Fd())
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") {
			continue
		}
		if e.IsDir() {
			if err := fn(name, nil, true); err != nil {
				return err
			}
			continue
		}
		data, err := readAt(dfd, name)
		if err != nil {
			continue // gone meanwhile, or not a regular file: nothing to serve
		}
		if err := fn(name, data, false); err != nil {
			return err
		}
	}
	return nil
}

// readAt reads a regular file by name relative to an open directory.
func readAt(dfd int, name string) ([]byte, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size > maxBody+maxHeader+preambleLen {
		return nil, fs.ErrInvalid
	}
	buf := make([]byte, st.Size)
	for off := 0; off < len(buf); {
		n, err := unix.Read(fd, buf[off:])
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return buf[:off], nil
		}
		off += n
	}
	return buf, nil
}
