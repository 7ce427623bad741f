package tt

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/rollbook/rollbook/pkg/kube"
	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// Module signing for kernels that load only signed modules (Secure Boot's
// lockdown, module.sig_enforce). The key is either a Secret in the helper
// namespace, mounted read-only into the kmd helper only (its two keys, at
// SigningMount; deploy/admission/helper-policy.yaml admits exactly this
// volume for the Secret its parameter names), or files on each node.
const (
	// DefaultSigningSecret is the Secret the shipped policy and role name.
	DefaultSigningSecret = "rollbook-tt-signing"
	SigningMount         = "/rollbook/signing"
	signingVolume        = "signing"
)

// SigningConfig is the signing key of a kmd run; zero: unsigned.
type SigningConfig struct {
	// Secret names a Secret with nodeagent.SigningKeyFile and
	// nodeagent.SigningCertFile.
	Secret string
	// KeyHostPath and CertHostPath are on every node.
	KeyHostPath, CertHostPath string

	// certSHA256 is the Secret's certificate's SHA-256, read by Load.
	certSHA256 string
}

func (s SigningConfig) enabled() bool {
	return s.Secret != "" || s.KeyHostPath != "" || s.CertHostPath != ""
}

func (s SigningConfig) validate() error {
	if s.Secret != "" {
		if s.KeyHostPath != "" || s.CertHostPath != "" {
			return fmt.Errorf("--signing-secret and --signing-key-host-path/--signing-cert-host-path are exclusive")
		}
		if errs := validation.IsDNS1123Subdomain(s.Secret); len(errs) > 0 {
			return fmt.Errorf("--signing-secret %q: %v", s.Secret, errs[0])
		}
		return nil
	}
	if err := (nodeagent.Signing{KeyHostPath: s.KeyHostPath, CertHostPath: s.CertHostPath}).Validate(); err != nil {
		return err
	}
	return nil
}

// Load reads the Secret's certificate (never the key, which only the
// helper reads) and checks both keys are there: a missing or malformed
// Secret stops the run before any node is touched.
func (s *SigningConfig) Load(ctx context.Context, cs kubernetes.Interface, ns string) error {
	if s.Secret == "" {
		return nil
	}
	sec, err := cs.CoreV1().Secrets(ns).Get(ctx, s.Secret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("--signing-secret: no Secret %s/%s; create it with keys %s (PEM private key) and %s (its certificate, "+
			"enrolled as a MOK on the nodes): kubectl -n %s create secret generic %s --from-file=%s=KEY --from-file=%s=CERT",
			ns, s.Secret, nodeagent.SigningKeyFile, nodeagent.SigningCertFile, ns, s.Secret, nodeagent.SigningKeyFile,
			nodeagent.SigningCertFile)
	case err != nil:
		return fmt.Errorf("--signing-secret: reading Secret %s/%s: %w", ns, s.Secret, err)
	}
	if len(sec.Data[nodeagent.SigningKeyFile]) == 0 {
		return fmt.Errorf("--signing-secret: Secret %s/%s has no key %s (the PEM private key)", ns, s.Secret, nodeagent.SigningKeyFile)
	}
	der, err := nodeagent.CertificateDER(sec.Data[nodeagent.SigningCertFile])
	if err != nil {
		return fmt.Errorf("--signing-secret: Secret %s/%s, key %s: %v", ns, s.Secret, nodeagent.SigningCertFile, err)
	}
	sum := sha256.Sum256(der)
	s.certSHA256 = hex.EncodeToString(sum[:])
	return nil
}

// identity is the signing key in the shared module's key: a Secret's by
// its certificate; host paths by the paths (nodes may hold different
// keys there; the helper refuses a shared module of another certificate).
func (s SigningConfig) identity() string {
	switch {
	case s.Secret != "":
		return "cert:" + s.certSHA256
	case s.enabled():
		return "host:" + s.KeyHostPath + "\x00" + s.CertHostPath
	}
	return signingKey
}

// probeArgs tell the probe which key the helper would sign with.
func (s SigningConfig) probeArgs() []string {
	switch {
	case s.Secret != "":
		return []string{"--signed-by", s.certSHA256}
	case s.enabled():
		return []string{"--signing-key-host-path", s.KeyHostPath, "--signing-cert-host-path", s.CertHostPath}
	}
	return nil
}

// kmdArgs tell the kmd helper where its key is.
func (s SigningConfig) kmdArgs() []string {
	switch {
	case s.Secret != "":
		return []string{"--signing-dir", SigningMount}
	case s.enabled():
		return []string{"--signing-key-host-path", s.KeyHostPath, "--signing-cert-host-path", s.CertHostPath}
	}
	return nil
}

// mount is the kmd helper's Secret volume, nil without a Secret.
func (s SigningConfig) mount() *kube.SecretMount {
	if s.Secret == "" {
		return nil
	}
	m := SigningSecretMount(s.Secret)
	return &m
}

// SigningSecretMount is the kmd helper's volume of signing Secret name.
func SigningSecretMount(name string) kube.SecretMount {
	return kube.SecretMount{Name: signingVolume, Secret: name, MountPath: SigningMount,
		Keys: []string{nodeagent.SigningKeyFile, nodeagent.SigningCertFile}}
}

// signingBlockers: under enforcement a module built here must be signed.
func (s SigningConfig) blockers(r *ProbeRecord, version string) []string {
	if !r.SignatureRequired || !s.enabled() {
		return nil
	}
	if c := r.Signing; c != nil && c.Error != "" && !r.Cached {
		return []string{fmt.Sprintf("the kernel loads only signed modules and tt-kmd %s would be built here, but cannot be signed: %s",
			version, c.Error)}
	}
	return nil
}
