package nodeagent

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
)

// A module is built once per kernel and vouched for by kubectl tt, not by
// the node that built it (docs/security.md, "Kernel modules: who
// vouches"). The kmd-build helper prints the module it built, gzipped, in
// its container log (the only way out of a pod that has no API
// credentials); the CLI reads the log, checks the module, signs it when it
// holds a signing key, and publishes it as a ConfigMap; every kmd helper of
// that kernel, the builder's included, gets the ConfigMap as a read-only
// volume and the module's SHA-256 in its argv, and loads nothing whose
// bytes hash to anything else. ModuleInfo describes the bytes; it is
// information, never the check.

// ModuleInfo describes a built tenstorrent.ko.
type ModuleInfo struct {
	// SHA256 and Size are of the module file (signature included).
	SHA256   string `json:"sha256"`
	Size     int64  `json:"size"`
	Version  string `json:"version"`
	Vermagic string `json:"vermagic"`
	Kernel   string `json:"kernel"`
	// KernelBuild is the build of the kernel it was built for (uname -v).
	KernelBuild string `json:"kernelBuild,omitempty"`
	// KernelConfig is that kernel's config digest (kmodule.ConfigDigest).
	KernelConfig string `json:"kernelConfig,omitempty"`
	Commit       string `json:"commit"`
	// GitURL is the repository the commit was cloned from.
	GitURL string `json:"gitURL,omitempty"`
	// BuiltBy is the node that built it.
	BuiltBy string `json:"builtBy,omitempty"`
	// Source is where this node got it: "build", "cache" or "cluster".
	Source string `json:"source,omitempty"`
	// Signer is the SHA-256 of the certificate it is signed with ("":
	// unsigned).
	Signer string `json:"signer,omitempty"`
}

// Names in a shared module's ConfigMap (and its volume).
const (
	SharedModuleKey = "tenstorrent.ko.gz"
	SharedInfoKey   = "module.json"
	// SharedCertKey is the certificate (DER) the module is signed with,
	// when kubectl tt signed it: public, what the node checks against.
	SharedCertKey = "signing_key.x509"
	// MaxModuleSize bounds a module read back from a log or a volume (a
	// stripped tt-kmd is about 184 KB; a ConfigMap holds at most 1 MiB).
	MaxModuleSize = 8 << 20
)

const (
	frameBegin = "-----BEGIN ROLLBOOK TT-KMD MODULE-----"
	frameEnd   = "-----END ROLLBOOK TT-KMD MODULE-----"
)

// writeModuleFrame prints raw gzipped and base64-encoded between markers.
func writeModuleFrame(w io.Writer, raw []byte) (int, error) {
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if _, err := zw.Write(raw); err != nil {
		return 0, err
	}
	if err := zw.Close(); err != nil {
		return 0, err
	}
	enc := base64.StdEncoding.EncodeToString(gz.Bytes())
	var b strings.Builder
	b.WriteString(frameBegin + "\n")
	for len(enc) > 0 {
		n := min(len(enc), 76)
		b.WriteString(enc[:n] + "\n")
		enc = enc[n:]
	}
	b.WriteString(frameEnd + "\n")
	_, err := io.WriteString(w, b.String())
	return gz.Len(), err
}

// ReadModuleFrame finds the last module printed in a helper's log and
// returns it gzipped, as printed.
func ReadModuleFrame(log []byte) ([]byte, error) {
	var enc strings.Builder
	in, found, done := false, false, false
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == frameBegin:
			enc.Reset()
			in, found, done = true, true, false
		case line == frameEnd && in:
			in, done = false, true
		case in:
			enc.WriteString(line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !found || !done {
		return nil, errors.New("the helper's log holds no complete module")
	}
	gz, err := base64.StdEncoding.DecodeString(enc.String())
	if err != nil {
		return nil, fmt.Errorf("the module in the helper's log is not base64: %w", err)
	}
	return gz, nil
}

// Gunzip unpacks a shared module, refusing one larger than MaxModuleSize.
func Gunzip(gz []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		return nil, fmt.Errorf("shared module is not gzip: %w", err)
	}
	raw, err := io.ReadAll(io.LimitReader(zr, MaxModuleSize+1))
	if err != nil {
		return nil, fmt.Errorf("shared module: %w", err)
	}
	if len(raw) > MaxModuleSize {
		return nil, fmt.Errorf("shared module is larger than %d bytes", MaxModuleSize)
	}
	return raw, nil
}

func hexSHA256(b []byte) string { sum := sha256.Sum256(b); return hex.EncodeToString(sum[:]) }
