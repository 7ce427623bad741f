package cluster

// Minimal PKI for a loopback-only test cluster: one CA, an apiserver serving
// cert for 127.0.0.1/localhost/kubernetes.default.svc, an admin client cert in
// system:masters, and an RSA key pair for service-account token signing.

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

type PKI struct {
	Dir                     string
	CACert, CAKey           string
	ServingCert, ServingKey string
	AdminCert, AdminKey     string
	ProxyCert, ProxyKey     string
	SAKey, SAPub            string
	AdminKubeconfig         string
	caCertPEM, adminCertPEM []byte
	adminKeyPEM             []byte
}

func newSerial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func writePEM(path, typ string, der []byte) ([]byte, error) {
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	return b, os.WriteFile(path, b, 0o600)
}

func ecKey() (*ecdsa.PrivateKey, []byte, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(k)
	return k, der, err
}

// generatePKI writes all files under dir/pki and an admin kubeconfig that
// points at https://127.0.0.1:<port>.
func generatePKI(dir string, apiserverPort int) (*PKI, error) {
	p := &PKI{Dir: filepath.Join(dir, "pki")}
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return nil, err
	}
	j := func(n string) string { return filepath.Join(p.Dir, n) }
	p.CACert, p.CAKey = j("ca.crt"), j("ca.key")
	p.ServingCert, p.ServingKey = j("apiserver.crt"), j("apiserver.key")
	p.AdminCert, p.AdminKey = j("admin.crt"), j("admin.key")
	p.ProxyCert, p.ProxyKey = j("front-proxy-client.crt"), j("front-proxy-client.key")
	p.SAKey, p.SAPub = j("sa.key"), j("sa.pub")
	p.AdminKubeconfig = filepath.Join(dir, "kubeconfig")

	now := time.Now().Add(-time.Hour)
	caKey, caKeyDER, err := ecKey()
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          newSerial(),
		Subject:               pkix.Name{CommonName: "rollbook-sim-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	if p.caCertPEM, err = writePEM(p.CACert, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	if _, err = writePEM(p.CAKey, "EC PRIVATE KEY", caKeyDER); err != nil {
		return nil, err
	}

	issue := func(certPath, keyPath string, tmpl *x509.Certificate) ([]byte, []byte, error) {
		k, kder, err := ecKey()
		if err != nil {
			return nil, nil, err
		}
		tmpl.SerialNumber = newSerial()
		tmpl.NotBefore = now
		tmpl.NotAfter = now.Add(10 * 365 * 24 * time.Hour)
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, k.Public(), crypto.Signer(caKey))
		if err != nil {
			return nil, nil, err
		}
		c, err := writePEM(certPath, "CERTIFICATE", der)
		if err != nil {
			return nil, nil, err
		}
		kp, err := writePEM(keyPath, "EC PRIVATE KEY", kder)
		return c, kp, err
	}
	if _, _, err := issue(p.ServingCert, p.ServingKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.0.0.1")},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
	}); err != nil {
		return nil, err
	}
	if p.adminCertPEM, p.adminKeyPEM, err = issue(p.AdminCert, p.AdminKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kubernetes-admin", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}

	// Front-proxy (requestheader) client cert: lets the apiserver publish a
	// requestheader CA in kube-system/extension-apiserver-authentication, which
	// kube-controller-manager/kube-scheduler delegated authn otherwise logs about.
	if _, _, err := issue(p.ProxyCert, p.ProxyKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "front-proxy-client"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}

	// Service-account signing key (RSA: accepted by every apiserver version).
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	if _, err = writePEM(p.SAKey, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)); err != nil {
		return nil, err
	}
	pubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	if _, err = writePEM(p.SAPub, "PUBLIC KEY", pubDER); err != nil {
		return nil, err
	}

	kc := clientcmdapi.NewConfig()
	kc.Clusters["rollbook-sim"] = &clientcmdapi.Cluster{
		Server:                   fmt.Sprintf("https://127.0.0.1:%d", apiserverPort),
		CertificateAuthorityData: p.caCertPEM,
	}
	kc.AuthInfos["admin"] = &clientcmdapi.AuthInfo{
		ClientCertificateData: p.adminCertPEM,
		ClientKeyData:         p.adminKeyPEM,
	}
	kc.Contexts["rollbook-sim"] = &clientcmdapi.Context{Cluster: "rollbook-sim", AuthInfo: "admin"}
	kc.CurrentContext = "rollbook-sim"
	if err := clientcmd.WriteToFile(*kc, p.AdminKubeconfig); err != nil {
		return nil, err
	}
	return p, nil
}

// freePorts asks the kernel for n distinct unused TCP ports on 127.0.0.1.
// All listeners stay open until every port is chosen: closing each one at
// once lets the kernel hand the same port out twice.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for len(ports) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
