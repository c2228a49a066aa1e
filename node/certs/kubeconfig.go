package certs

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Kubeconfig is the part of a kubeconfig nodehub reads: the current context's cluster and user.
type Kubeconfig struct {
	Server string
	// CA is PEM; from certificate-authority-data or the certificate-authority file.
	CA []byte
	// CertFile/KeyFile, or CertData/KeyData when the kubeconfig embeds them.
	CertFile, KeyFile string
	CertData, KeyData []byte
	Token             string
}

type rawKubeconfig struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string `json:"name"`
		Cluster struct {
			Server   string `json:"server"`
			CA       string `json:"certificate-authority"`
			CAData   string `json:"certificate-authority-data"`
			Insecure bool   `json:"insecure-skip-tls-verify"`
		} `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User struct {
			Cert     string `json:"client-certificate"`
			CertData string `json:"client-certificate-data"`
			Key      string `json:"client-key"`
			KeyData  string `json:"client-key-data"`
			Token    string `json:"token"`
		} `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
}

// LoadKubeconfig reads a kubeconfig file (YAML or JSON). Relative file paths in it are taken
// relative to the kubeconfig's directory, as kubectl does.
func LoadKubeconfig(path string) (*Kubeconfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("certs: kubeconfig: %w", err)
	}
	return parseKubeconfig(data, path, os.ReadFile)
}

// parseKubeconfig reads a kubeconfig's bytes; readFile reads the files it names.
func parseKubeconfig(data []byte, path string, readFile func(string) ([]byte, error)) (*Kubeconfig, error) {
	js, err := yamlToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("certs: kubeconfig %s: %w", path, err)
	}
	var raw rawKubeconfig
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, fmt.Errorf("certs: kubeconfig %s: %w", path, err)
	}
	clusterName, userName := "", ""
	for _, c := range raw.Contexts {
		if c.Name == raw.CurrentContext || raw.CurrentContext == "" {
			clusterName, userName = c.Context.Cluster, c.Context.User
			break
		}
	}
	kc := &Kubeconfig{}
	dir := filepath.Dir(path)
	abs := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(dir, p)
	}
	for i, c := range raw.Clusters {
		if c.Name != clusterName && !(clusterName == "" && i == 0) {
			continue
		}
		kc.Server = c.Cluster.Server
		switch {
		case c.Cluster.CAData != "":
			if kc.CA, err = base64.StdEncoding.DecodeString(c.Cluster.CAData); err != nil {
				return nil, fmt.Errorf("certs: kubeconfig %s: certificate-authority-data: %w", path, err)
			}
		case c.Cluster.CA != "":
			if kc.CA, err = readFile(abs(c.Cluster.CA)); err != nil {
				return nil, fmt.Errorf("certs: kubeconfig %s: %w", path, err)
			}
		}
		break
	}
	for i, u := range raw.Users {
		if u.Name != userName && !(userName == "" && i == 0) {
			continue
		}
		kc.CertFile, kc.KeyFile, kc.Token = abs(u.User.Cert), abs(u.User.Key), u.User.Token
		if u.User.CertData != "" {
			if kc.CertData, err = base64.StdEncoding.DecodeString(u.User.CertData); err != nil {
				return nil, fmt.Errorf("certs: kubeconfig %s: client-certificate-data: %w", path, err)
			}
		}
		if u.User.KeyData != "" {
			if kc.KeyData, err = base64.StdEncoding.DecodeString(u.User.KeyData); err != nil {
				return nil, fmt.Errorf("certs: kubeconfig %s: client-key-data: %w", path, err)
			}
		}
		break
	}
	return kc, nil
}
