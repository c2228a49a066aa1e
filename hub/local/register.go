package local

import (
	"fmt"
	"net/http"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"nodehub/wire"
)

// createNode answers kubelet's node registration offline. For this node, when it is cached, the
// answer is the apiserver's for a node that exists: 409 with reason AlreadyExists, after which
// kubelet reads the node (from the cache) and goes on. Any other node, or this one never cached,
// would be a lost write: 503.
func (p *Proxy) createNode(w http.ResponseWriter, r *http.Request, req *Request) {
	body, err := readBody(r)
	if err != nil {
		p.answerError(w, req, err, http.StatusBadRequest)
		return
	}
	m, err := wire.ExtractMeta(body, "nodes")
	if err != nil {
		p.status(w, req, http.StatusBadRequest, "nodehub: "+err.Error())
		return
	}
	if m.Name == "" || m.Name != p.NodeName {
		p.status(w, req, http.StatusServiceUnavailable, fmt.Sprintf("nodehub: the cloud is unreachable and only this node (%s) can be registered offline", p.NodeName))
		return
	}
	named := *req.Info
	named.Name = m.Name
	lookup := &Request{Info: &named, Owners: req.Owners}
	if _, _, err := p.lookup(lookup); err != nil {
		p.status(w, req, http.StatusServiceUnavailable, fmt.Sprintf("nodehub: the cloud is unreachable and node %q was never cached, so its registration cannot be answered", m.Name))
		return
	}
	st := wire.NewStatus(http.StatusConflict, fmt.Sprintf("nodes %q already exists", m.Name))
	st.Reason = metav1.StatusReasonAlreadyExists
	st.Details = &metav1.StatusDetails{Name: m.Name, Kind: "nodes"}
	out, ct := wire.EncodeStatus(st, req.Info.Accept.IsProtobuf())
	writeBody(w, http.StatusConflict, ct, out)
}
