package controlplane

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// pki is the files the control plane's TLS and tokens need.
type pki struct {
	caCert, serverCert, serverKey, adminCert, adminKey, saKey, saPub string
	caPEM, adminCertPEM, adminKeyPEM                                 []byte
}

// writePKI makes a CA, a serving certificate for 127.0.0.1, an admin
// client certificate (O=system:masters) and the service-account key pair.
func writePKI(dir string) (*pki, error) {
	dir = filepath.Join(dir, "pki")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now().Add(-time.Hour)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "controlplane-test-ca"},
		NotBefore: now, NotAfter: now.Add(48 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if p.caCert, err = write(dir, "ca.crt", p.caPEM); err != nil {
		return nil, err
	}
	leaf := func(name string, serial int64, tmpl x509.Certificate) (certPEM, keyPEM []byte, err error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, nil, err
		}
		tmpl.SerialNumber, tmpl.NotBefore, tmpl.NotAfter = big.NewInt(serial), now, now.Add(48*time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, &tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, nil, fmt.Errorf("certificate %s: %w", name, err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, nil, err
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
			pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
	}
	sc, sk, err := leaf("server", 2, x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	})
	if err != nil {
		return nil, err
	}
	if p.serverCert, err = write(dir, "server.crt", sc); err != nil {
		return nil, err
	}
	if p.serverKey, err = write(dir, "server.key", sk); err != nil {
		return nil, err
	}
	if p.adminCertPEM, p.adminKeyPEM, err = leaf("admin", 3, x509.Certificate{
		Subject:     pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	kder, err := x509.MarshalECPrivateKey(saKey)
	if err != nil {
		return nil, err
	}
	pder, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if p.saKey, err = write(dir, "sa.key", pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})); err != nil {
		return nil, err
	}
	if p.saPub, err = write(dir, "sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pder})); err != nil {
		return nil, err
	}
	return p, nil
}

func write(dir, name string, b []byte) (string, error) {
	p := filepath.Join(dir, name)
	return p, os.WriteFile(p, b, 0o600)
}

// writeKubeconfig writes the admin's kubeconfig.
func writeKubeconfig(dir, server string, p *pki) (string, error) {
	path := filepath.Join(dir, "admin.kubeconfig")
	return path, WriteKubeconfig(path, server, p.caPEM, &clientcmdapi.AuthInfo{
		ClientCertificateData: p.adminCertPEM, ClientKeyData: p.adminKeyPEM,
	})
}

// WriteKubeconfig writes a kubeconfig for server with one user.
func WriteKubeconfig(path, server string, ca []byte, user *clientcmdapi.AuthInfo) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos["user"] = user
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "user"}
	cfg.CurrentContext = "test"
	return clientcmd.WriteToFile(*cfg, path)
}

// TokenKubeconfig writes a kubeconfig that authenticates with a bearer
// token (a service account's), for running a client with its RBAC.
func (cp *ControlPlane) TokenKubeconfig(path, token string) error {
	return WriteKubeconfig(path, cp.Server, cp.CA, &clientcmdapi.AuthInfo{Token: token})
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = 200, 400
	return cfg, nil
}
