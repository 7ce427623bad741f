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
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"syscall"
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

// Ports are picked below the kernel's ephemeral range (32768–60999 by
// default), so an outgoing connection or a listen on :0 by anything else on
// the machine cannot take one between the pick and the component's bind.
const portLow, portHigh = 20000, 32767

// freePorts picks n distinct unused TCP ports on 127.0.0.1, checking each by
// binding it. All listeners stay open until every port is chosen. Callers
// hold PortLock until their components have bound, so two sims starting at
// once never pick the same port.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, fmt.Errorf("no free ports between %d and %d", portLow, portHigh)
		}
		p := portLow + mrand.IntN(portHigh-portLow+1)
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ls = append(ls, l)
		ports = append(ports, p)
	}
	return ports, nil
}

// PortLock serialises sim start-ups on this machine from picking ports
// until every component listens. Unlock with the returned function.
func PortLock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(os.TempDir(), "rollbook-sim-ports.lock"), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
