package wire

import (
	"crypto/tls"
	"crypto/x509"
)

// Credentials are a client's TLS identity towards the kube-apiservers (and the pool's leader): the
// cluster CA that verifies the server, and the client certificate presented (its current one:
// it may be renewed). The node's credentials (node/certs) implement it; the backends, the serving
// certificate's CSRs and the pool's peers use it.
type Credentials interface {
	CAPool() *x509.CertPool
	GetClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error)
}
