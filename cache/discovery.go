package cache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"path/filepath"
)

// Discovery answers (/version, /api, /apis, /api/v1, /apis/<group>/<version>, in their plain and
// aggregated forms) are kept so that kubectl works offline. They are the same for every client,
// so they are stored once, by path and the form asked for.

const discoveryDir = ".discovery"

func discoveryPath(path, form string) string {
	sum := sha256.Sum256([]byte(path + "\x00" + form))
	return filepath.Join(discoveryDir, hex.EncodeToString(sum[:12]))
}

// PutDiscovery stores one discovery answer.
func (s *Store) PutDiscovery(path, form, contentType string, body []byte) error {
	data, err := encodeFile(&Header{ContentType: contentType, Name: path, Kind: form}, body)
	if err != nil {
		return err
	}
	old, err := s.readMeta(discoveryPath(path, form))
	if err == nil && bytes.Equal(old, data) {
		return nil // unchanged: no write
	}
	return s.writeMeta(discoveryPath(path, form), data)
}

// GetDiscovery returns one stored discovery answer and its content type.
func (s *Store) GetDiscovery(path, form string) (string, []byte, error) {
	data, err := s.readMeta(discoveryPath(path, form))
	if err != nil {
		return "", nil, err
	}
	h, body, err := decodeFile(data, "")
	if err != nil || h.Name != path {
		return "", nil, errors.Join(ErrNotFound, err)
	}
	return h.ContentType, body, nil
}
