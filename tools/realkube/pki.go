package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is what `up` writes under D/pki: a CA, the serving certificate it signs (127.0.0.1, ::1,
// localhost and the in-cluster names), the service-account signing key and the bearer tokens.
type pki struct {
	caPEM       []byte
	servingCert string
	servingKey  string
	saKey       string
	tokenFile   string
	tokens      map[string]string // user → token
}

// users of the token file: every one is in system:masters, so priority and fairness exempts them
// all alike and the operator and the native controller are measured under the same rules.
var users = []string{"admin", "kube-controller-manager"}

func writePKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	caKey, caCert, err := newCA()
	if err != nil {
		return nil, err
	}
	p := &pki{
		caPEM:       pemBlock("CERTIFICATE", caCert.Raw),
		servingCert: filepath.Join(dir, "serving.crt"),
		servingKey:  filepath.Join(dir, "serving.key"),
		saKey:       filepath.Join(dir, "sa.key"),
		tokenFile:   filepath.Join(dir, "tokens.csv"),
		tokens:      map[string]string{},
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), p.caPEM, 0o644); err != nil {
		return nil, err
	}
	// `realkube node` signs its kubelet's client certificate (system:node:N) with it.
	if err := writeKeyPEM(filepath.Join(dir, "ca.key"), caKey); err != nil {
		return nil, err
	}
	if err := writeServing(p, caKey, caCert); err != nil {
		return nil, err
	}
	if err := writeKey(p.saKey); err != nil {
		return nil, err
	}
	return p, writeTokens(p)
}

func newCA() (*ecdsa.PrivateKey, *x509.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("CA key: %w", err)
	}
	template := certTemplate("realkube-ca")
	template.IsCA = true
	template.BasicConstraintsValid = true
	template.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	return key, cert, err
}

func writeServing(p *pki, caKey *ecdsa.PrivateKey, ca *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("serving key: %w", err)
	}
	template := certTemplate("kube-apiserver")
	template.KeyUsage = x509.KeyUsageDigitalSignature
	template.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	template.IPAddresses = []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1"), net.ParseIP("10.96.0.1")}
	template.DNSNames = []string{"localhost", "kubernetes", "kubernetes.default",
		"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}
	der, err := x509.CreateCertificate(rand.Reader, template, ca, &key.PublicKey, caKey)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	if err := os.WriteFile(p.servingCert, pemBlock("CERTIFICATE", der), 0o644); err != nil {
		return err
	}
	return writeKeyPEM(p.servingKey, key)
}

func certTemplate(cn string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	now := time.Now()
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
	}
}

func writeKey(path string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("key %s: %w", path, err)
	}
	return writeKeyPEM(path, key)
}

func writeKeyPEM(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	return os.WriteFile(path, pemBlock("EC PRIVATE KEY", der), 0o600)
}

func writeTokens(p *pki) error {
	var csv []byte
	for i, user := range users {
		raw := make([]byte, 24)
		if _, err := rand.Read(raw); err != nil {
			return fmt.Errorf("token: %w", err)
		}
		token := hex.EncodeToString(raw)
		p.tokens[user] = token
		csv = fmt.Appendf(csv, "%s,%s,%d,\"system:masters\"\n", token, user, i+1)
	}
	return os.WriteFile(p.tokenFile, csv, 0o600)
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}
