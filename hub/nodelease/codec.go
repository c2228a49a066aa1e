package nodelease

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"nodehub/wire"
)

// readLease reads kubelet's Lease from a request body (JSON or protobuf), at most maxBody bytes.
func readLease(r *http.Request, ri *wire.RequestInfo) (*wire.Lease, error) {
	data, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("read lease: %w", err)
	}
	if len(data) > maxBody {
		return nil, fmt.Errorf("lease body larger than %d bytes", maxBody)
	}
	lease := &wire.Lease{}
	if ri.ContentType.IsProtobuf() {
		if _, _, err := wire.DecodeProto(data, lease); err != nil {
			return nil, err
		}
	} else if err := json.Unmarshal(data, lease); err != nil {
		return nil, fmt.Errorf("decode lease: %w", err)
	}
	if lease.Namespace == "" {
		lease.Namespace = Namespace
	}
	return lease, nil
}

// writeLease answers with lease in the format the client accepts.
func writeLease(w http.ResponseWriter, accept wire.MediaType, code int, lease *wire.Lease) {
	lease.APIVersion, lease.Kind = apiVersion, "Lease"
	var (
		data []byte
		err  error
		ct   = wire.MediaJSON
	)
	if accept.IsProtobuf() {
		data, err = wire.EncodeProto(apiVersion, "Lease", lease)
		ct = wire.MediaProtobuf
	} else {
		data, err = json.Marshal(lease)
	}
	if err != nil {
		wire.WriteStatus(w, accept, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.WriteHeader(code)
	_, _ = w.Write(data)
}
