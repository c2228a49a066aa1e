package certs

import (
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"time"
)

// File names under <--root-dir>/pki, as YurtHub names them (a contract between nodehub's parts:
// whoever reads them reloads on a change of mtime).
const (
	ClientPEMName  = "yurthub-current.pem"        // the node's client certificate, then its key
	ServingPEMName = "yurthub-server-current.pem" // the hub's serving certificate, then its key
	CAName         = "ca.crt"                     // the cluster CA, as bootstrap verified it
)

// keyPEM encodes an EC private key.
func keyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

// loadPair reads a PEM file holding a certificate chain and its key. It fails on a certificate
// that has expired (at now).
func loadPair(path string, now time.Time) (*tls.Certificate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parsePair(data, now)
}

func parsePair(data []byte, now time.Time) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(data, data)
	if err != nil {
		return nil, err
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, err
		}
	}
	if now.After(c.Leaf.NotAfter) {
		return &c, fmt.Errorf("%w: expired at %s", errExpired, c.Leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return &c, nil
}

// renewAt is when a certificate valid until na, obtained at got, is renewed: at 70–90% of its
// lifetime, jitter (0..1) choosing where, so a fleet of gateways does not renew at one instant.
// The lifetime counts from when the hub got the certificate, not from NotBefore: signers
// backdate NotBefore (kube-controller-manager by 5 minutes), which would make a short-lived
// certificate look 70% used the moment it is issued.
func renewAt(got, nb, na time.Time, jitter float64) time.Time {
	if got.Before(nb) {
		got = nb
	}
	life := na.Sub(got)
	return got.Add(time.Duration(float64(life) * (0.7 + 0.2*jitter)))
}

// fileTime is a file's mtime (when a certificate stored there was obtained), or now.
func fileTime(path string) time.Time {
	if st, err := os.Stat(path); err == nil {
		return st.ModTime()
	}
	return time.Now()
}
