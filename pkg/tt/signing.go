package tt

import (
	"errors"
	"fmt"
	"os"

	"github.com/rollbook/rollbook/pkg/kmodule"
)

// Module signing for kernels that load only signed modules (Secure Boot's
// lockdown, module.sig_enforce). kubectl tt signs each module it vouches
// for itself, with a key file on the operator's machine: the key never
// enters the cluster, a pod spec, an Event or a log. Nodes get only the
// certificate (beside the shared module, named by its SHA-256 in the kmd
// helper's argv) to check the signature before they unload anything; the
// kernel checks it against the keys it trusts (docs/security.md, "Kernel
// modules: who vouches").

// SigningConfig is the signing key of a kmd run; zero: unsigned.
type SigningConfig struct {
	// KeyFile and CertFile are paths on the machine kubectl tt runs on: a
	// PEM private key (PKCS#8 or PKCS#1, RSA) and its certificate (DER or
	// PEM), the one enrolled as a MOK on the nodes.
	KeyFile, CertFile string
	// The flags of releases that signed on the nodes: set, they are an
	// error that says what to do instead.
	LegacySecret, LegacyKeyHostPath, LegacyCertHostPath string

	signer *kmodule.Signer
}

func (s SigningConfig) enabled() bool { return s.KeyFile != "" || s.CertFile != "" }

func (s SigningConfig) validate() error {
	switch {
	case s.LegacySecret != "":
		return fmt.Errorf("--signing-secret is gone: the module-signing key no longer goes into the cluster (every kmd helper "+
			"mounted it, so one compromised node had it). kubectl tt now signs each module itself: pass --signing-key FILE "+
			"--signing-cert FILE, files on this machine (e.g. kubectl -n NAMESPACE get secret %s -o "+
			`jsonpath='{.data.signing_key\.pem}' | base64 -d > MOK.priv, likewise signing_key.x509 > MOK.der; then delete `+
			"that Secret)", s.LegacySecret)
	case s.LegacyKeyHostPath != "" || s.LegacyCertHostPath != "":
		return errors.New("--signing-key-host-path and --signing-cert-host-path are gone: a signing key on the nodes is one " +
			"every compromised node holds. kubectl tt now signs each module itself: copy the key and its certificate to this " +
			"machine, pass --signing-key FILE --signing-cert FILE, and remove the key from the nodes")
	case (s.KeyFile == "") != (s.CertFile == ""):
		return errors.New("--signing-key and --signing-cert go together: the private key and its certificate")
	}
	return nil
}

// Load reads the key and the certificate and checks they belong together,
// before anything in the cluster is touched. Errors name the files, never
// their content.
func (s *SigningConfig) Load() error {
	if err := s.validate(); err != nil {
		return err
	}
	if !s.enabled() {
		return nil
	}
	key, err := os.ReadFile(s.KeyFile)
	if err != nil {
		return fmt.Errorf("--signing-key: %v", errors.Unwrap(err))
	}
	if fi, err := os.Stat(s.KeyFile); err == nil && fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("--signing-key %s is readable by others (mode %#o): chmod 600 it", s.KeyFile, fi.Mode().Perm())
	}
	cert, err := os.ReadFile(s.CertFile)
	if err != nil {
		return fmt.Errorf("--signing-cert: %v", errors.Unwrap(err))
	}
	signer, err := kmodule.NewSigner(key, cert)
	clear(key)
	if err != nil {
		return fmt.Errorf("--signing-key %s, --signing-cert %s: %v", s.KeyFile, s.CertFile, err)
	}
	s.signer = signer
	return nil
}

// certSHA256 is the signing certificate's SHA-256 ("" unsigned).
func (s SigningConfig) certSHA256() string {
	if s.signer == nil {
		return ""
	}
	return s.signer.CertSHA256()
}

// identity is the signing key in the shared module's key.
func (s SigningConfig) identity() string {
	if sha := s.certSHA256(); sha != "" {
		return "cert:" + sha
	}
	return "unsigned"
}

// signatureBlockers: a kernel that loads only signed modules needs a key.
func (s SigningConfig) signatureBlockers(r *ProbeRecord) []string {
	if !r.SignatureRequired || s.enabled() {
		return nil
	}
	return []string{r.LoadRefused + "; tt-kmd " + orUnknown(r.KMD) + " stays loaded"}
}
