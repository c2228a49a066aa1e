package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"nodehub/wire"
)

// ListRecord is what the cache remembers of one distinct list (namespace + label selector + field
// selector) of a resource: that it was seen, its resourceVersion, whether the objects on disk are
// all of it, and the keys its last complete answer held. Objects are stored once per resource
// whatever list brought them; a list is read back by evaluating its selectors over them, and an
// object leaves the disk when no list's last answer holds it any more.
type ListRecord struct {
	Namespace       string `json:"ns,omitempty"`
	LabelSelector   string `json:"labelSelector,omitempty"`
	FieldSelector   string `json:"fieldSelector,omitempty"`
	ResourceVersion string `json:"rv,omitempty"`
	// APIVersion and Kind are the items' (Pod for a PodList), so an empty list can be answered.
	APIVersion string    `json:"av,omitempty"`
	Kind       string    `json:"kind,omitempty"`
	Complete   bool      `json:"complete"`
	At         time.Time `json:"at"`
	Keys       []string  `json:"keys,omitempty"`
}

// Selector parses the record's scope.
func (r ListRecord) Selector() (wire.Selector, error) {
	return wire.NewSelector(r.Namespace, r.LabelSelector, r.FieldSelector)
}

// listID names a list's record file.
func listID(ns, ls, fs string) string {
	sum := sha256.Sum256([]byte(ns + "\x00" + ls + "\x00" + fs))
	return hex.EncodeToString(sum[:8])
}

func listPath(r Resource, ns, ls, fs string) string {
	return filepath.Join(r.Dir(), listsDir, listID(ns, ls, fs))
}

// PutList records a list.
func (s *Store) PutList(r Resource, rec ListRecord) error {
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return s.writeMeta(listPath(r, rec.Namespace, rec.LabelSelector, rec.FieldSelector), data)
}

// List returns the record of one list, or ErrNotFound.
func (s *Store) List(r Resource, ns, ls, fs string) (ListRecord, error) {
	var rec ListRecord
	data, err := s.readMeta(listPath(r, ns, ls, fs))
	if err != nil {
		return rec, err
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		return rec, ErrNotFound
	}
	return rec, nil
}

// Lists returns every list record of a resource.
func (s *Store) Lists(r Resource) ([]ListRecord, error) {
	dir := filepath.ToSlash(filepath.Join(r.Dir(), listsDir))
	entries, err := fs.ReadDir(s.root.FS(), dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []ListRecord
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), tmpPrefix) {
			continue
		}
		data, err := s.readMeta(filepath.Join(dir, e.Name()))
		if err != nil {
			continue
		}
		var rec ListRecord
		if json.Unmarshal(data, &rec) == nil {
			out = append(out, rec)
		}
	}
	return out, nil
}

// MarkIncomplete records, for every list of a resource, that objects were lost (a full queue):
// each list is incomplete until it is listed again in full.
func (s *Store) MarkIncomplete(r Resource) error {
	recs, err := s.Lists(r)
	if err != nil {
		return err
	}
	for _, rec := range recs {
		if rec.Complete {
			rec.Complete = false
			if err := s.PutList(r, rec); err != nil {
				return err
			}
		}
	}
	return nil
}
