package nodeagent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Signing says with which key the agent signs the modules it builds, for
// kernels that load only signed modules (module.sig_enforce, lockdown under
// Secure Boot). The certificate must be one the kernel trusts (built in, or
// enrolled as a MOK by the admin); the agent only signs.
type Signing struct {
	// Dir holds SigningKeyFile and SigningCertFile (a Secret volume).
	Dir string
	// KeyHostPath and CertHostPath are on the host (e.g. DKMS's
	// /var/lib/dkms/mok.key and mok.pub, Ubuntu's
	// /var/lib/shim-signed/mok/MOK.priv and MOK.der).
	KeyHostPath, CertHostPath string
}

// Files of a signing Secret, as the kernel's own build names them
// (certs/signing_key.pem: PEM private key; signing_key.x509: certificate,
// DER or PEM).
const (
	SigningKeyFile  = "signing_key.pem"
	SigningCertFile = "signing_key.x509"
)

// moduleSigMarker ends a signed module (the kernel's MODULE_SIG_STRING).
const moduleSigMarker = "~Module signature appended~\n"

// Enabled reports a key is configured.
func (s Signing) Enabled() bool { return s.Dir != "" || s.KeyHostPath != "" || s.CertHostPath != "" }

// Validate rejects a half or ambiguous configuration and host paths that
// cannot be a key file.
func (s Signing) Validate() error {
	switch {
	case s.Dir != "" && (s.KeyHostPath != "" || s.CertHostPath != ""):
		return fmt.Errorf("a signing Secret and signing host paths are exclusive")
	case s.Dir != "":
		return nil
	case (s.KeyHostPath == "") != (s.CertHostPath == ""):
		return fmt.Errorf("--signing-key-host-path and --signing-cert-host-path go together")
	}
	for _, p := range []string{s.KeyHostPath, s.CertHostPath} {
		if p == "" {
			continue
		}
		if err := validateHostFilePath(p); err != nil {
			return err
		}
	}
	return nil
}

func validateHostFilePath(p string) error {
	switch {
	case !filepath.IsAbs(p) || filepath.Clean(p) != p:
		return fmt.Errorf("%q is not an absolute, clean path on the host", p)
	case strings.ContainsAny(p, "\x00\n"):
		return fmt.Errorf("%q has a control character", p)
	}
	for _, virt := range []string{"/proc", "/sys", "/dev"} {
		if p == virt || strings.HasPrefix(p, virt+"/") {
			return fmt.Errorf("%q is under %s, not a key file", p, virt)
		}
	}
	return nil
}

// keyCert are where the key and certificate are read, as the agent sees
// them (the helper's file system or the host's, under Root).
func (a *Agent) keyCert(s Signing) (key, cert string) {
	if s.Dir != "" {
		return filepath.Join(s.Dir, SigningKeyFile), filepath.Join(s.Dir, SigningCertFile)
	}
	return a.hostPath(strings.TrimPrefix(s.KeyHostPath, "/")), a.hostPath(strings.TrimPrefix(s.CertHostPath, "/"))
}

// Signer is the identity of s's key: the hex SHA-256 of its certificate
// (DER), as the cache and the shared-module key name it. The key itself is
// only checked to be there.
func (a *Agent) Signer(s Signing) (string, error) {
	key, cert := a.keyCert(s)
	b, err := os.ReadFile(cert)
	if err != nil {
		return "", fmt.Errorf("signing certificate: %v", err)
	}
	der, err := CertificateDER(b)
	if err != nil {
		return "", fmt.Errorf("signing certificate %s: %v", cert, err)
	}
	if fi, err := os.Stat(key); err != nil || !fi.Mode().IsRegular() {
		return "", fmt.Errorf("signing key: %v", orNotRegular(err, key))
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

func orNotRegular(err error, p string) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("%s is not a regular file", p)
}

// CertificateDER is the first certificate of b, PEM or DER.
func CertificateDER(b []byte) ([]byte, error) {
	if blk, _ := pem.Decode(b); blk != nil {
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %q is not a CERTIFICATE", blk.Type)
		}
		b = blk.Bytes
	}
	c, err := x509.ParseCertificate(b)
	if err != nil {
		return nil, fmt.Errorf("not an X.509 certificate (PEM or DER): %v", err)
	}
	return c.Raw, nil
}

var sigHashRE = regexp.MustCompile(`(?m)^CONFIG_MODULE_SIG_HASH="?([a-z0-9-]+)"?\s*$`)

// moduleSigHash is the hash the kernel signs its modules with
// (CONFIG_MODULE_SIG_HASH of the headers' auto.conf, else .config).
func moduleSigHash(buildDir string) (string, error) {
	for _, f := range []string{"include/config/auto.conf", ".config"} {
		b, err := os.ReadFile(filepath.Join(buildDir, f))
		if err != nil {
			continue
		}
		if m := sigHashRE.FindSubmatch(b); m != nil {
			return string(m[1]), nil
		}
	}
	return "", fmt.Errorf("the kernel headers name no CONFIG_MODULE_SIG_HASH (include/config/auto.conf, .config): " +
		"is module signing (CONFIG_MODULE_SIG) built into this kernel?")
}

// signFileOf is the kernel's own sign-file of kver's headers, as the host
// sees it (Debian: a link into linux-kbuild-<ver>).
func signFileOf(kver string) string {
	return filepath.Join("/lib/modules", kver, "build/scripts/sign-file")
}

// signingReady says what signing on this host would lack ("" when
// nothing): the headers' sign-file and hash, the key and certificate.
func (a *Agent) signingReady(kver string, s Signing) (signer, hash string, err error) {
	if signer, err = a.Signer(s); err != nil {
		return "", "", err
	}
	hash, err = a.signTool(kver)
	return signer, hash, err
}

// signTool checks the headers' sign-file and returns the hash they name.
func (a *Agent) signTool(kver string) (string, error) {
	build, err := resolveInRoot(a.Root, filepath.Join("lib/modules", kver, "build"))
	if err != nil {
		return "", fmt.Errorf("no kernel build tree at /lib/modules/%s/build to sign with", kver)
	}
	hash, err := moduleSigHash(build)
	if err != nil {
		return "", err
	}
	if p, err := resolveInRoot(a.Root, strings.TrimPrefix(signFileOf(kver), "/")); err != nil || !isExecutable(p) {
		return hash, fmt.Errorf("the kernel headers have no %s (linux-headers-%s ships it)", signFileOf(kver), kver)
	}
	return hash, nil
}

// SigningCheck is the probe's look at signing on the node.
type SigningCheck struct {
	// Signer is the certificate's SHA-256 (given for a Secret's, read for
	// a host path's).
	Signer string `json:"signer,omitempty"`
	// Hash is the headers' CONFIG_MODULE_SIG_HASH.
	Hash string `json:"hash,omitempty"`
	// Error says why a module built here could not be signed.
	Error string `json:"error,omitempty"`
}

// checkSigning is the probe's SigningCheck: with host paths it reads the
// certificate and finds the key; a Secret's certificate is signedBy (the
// probe does not mount it).
func (a *Agent) checkSigning(kver string, s Signing, signedBy string) *SigningCheck {
	c := &SigningCheck{Signer: signedBy}
	var err error
	if s.Enabled() {
		c.Signer, c.Hash, err = a.signingReady(kver, s)
	} else {
		c.Hash, err = a.signTool(kver)
	}
	if err != nil {
		c.Error = err.Error()
	}
	return c
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// sign signs ko (on the host, under work) in place with the headers'
// sign-file, run in a chroot of the host as the build is (it links the
// host's libcrypto). A key from a Secret is copied next to the module for
// the time of the signing (mode 0600, removed with work).
func (x *execution) sign(ctx context.Context, ko, work string, s Signing, kver string) (string, error) {
	a := x.agent
	signer, hash, err := a.signingReady(kver, s)
	if err != nil {
		return "", fail(ReasonSigningFailed, "cannot sign the module: %v", err)
	}
	key, cert := s.KeyHostPath, s.CertHostPath
	if s.Dir != "" {
		dir, err := os.MkdirTemp(work, ".signing-")
		if err != nil {
			return "", err
		}
		defer os.RemoveAll(dir)
		srcKey, srcCert := a.keyCert(s)
		for src, dst := range map[string]string{srcKey: filepath.Join(dir, SigningKeyFile), srcCert: filepath.Join(dir, SigningCertFile)} {
			b, err := os.ReadFile(src)
			if err != nil {
				return "", fail(ReasonSigningFailed, "cannot sign the module: %v", err)
			}
			if err := os.WriteFile(dst, b, 0o600); err != nil {
				return "", err
			}
		}
		key, cert = a.inHost(filepath.Join(dir, SigningKeyFile)), a.inHost(filepath.Join(dir, SigningCertFile))
	}
	r := x.run(ctx, a.onHost(signFileOf(kver), hash, key, cert, a.inHost(ko)))
	if r.err != nil {
		return "", toolFailure(ReasonSigningFailed, r, "sign-file "+hash)
	}
	b, err := os.ReadFile(ko)
	if err != nil {
		return "", err
	}
	if !bytes.HasSuffix(b, []byte(moduleSigMarker)) {
		return "", failOutput(ReasonSigningFailed, r, "sign-file exited 0 but %s carries no signature", kmdModuleFile)
	}
	return fmt.Sprintf("signed (%s) with certificate SHA-256 %s…", hash, signer[:12]), nil
}

// inHost is p (under Root) as the host sees it.
func (a *Agent) inHost(p string) string {
	if a.Root == "/" || a.Root == "" {
		return p
	}
	rel, err := filepath.Rel(a.Root, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	return filepath.Join("/", rel)
}

// cachedModule is the module cache's file for (kernel, version, signer):
// a signed build is cached apart from an unsigned one and from one signed
// with another key.
func (a *Agent) cachedModule(kver, version, signer string) string {
	p := filepath.Join(kmdCacheDir, kver, version)
	if signer != "" {
		p = filepath.Join(p, "signed-"+signer[:16])
	}
	return a.hostPath(filepath.Join(p, kmdModuleFile))
}
