package nodeagent

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// A module built on one node is shared with the nodes that run the same
// kernel: the helper that built it prints it, gzipped, in its container log
// (the only way out of a pod that has no API credentials); the CLI reads the
// log, checks it against the helper's result and publishes it as a
// ConfigMap; later helpers get that ConfigMap as a read-only volume and
// check it again before loading it. ModuleInfo is the record that travels
// with the bytes at every hop, and the cache record (.json beside the .ko)
// keeps it.

// ModuleInfo describes a built tenstorrent.ko.
type ModuleInfo struct {
	// SHA256 and Size are of the uncompressed module.
	SHA256   string `json:"sha256"`
	Size     int64  `json:"size"`
	Version  string `json:"version"`
	Vermagic string `json:"vermagic"`
	Kernel   string `json:"kernel"`
	Commit   string `json:"commit"`
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
	// MaxModuleSize bounds a module read back from a log or a volume (a
	// stripped tt-kmd is about 184 KB; a ConfigMap holds at most 1 MiB).
	MaxModuleSize = 8 << 20
)

const (
	frameBegin = "-----BEGIN ROLLBOOK TT-KMD MODULE-----"
	frameEnd   = "-----END ROLLBOOK TT-KMD MODULE-----"
)

// writeModuleFrame prints ko gzipped and base64-encoded between markers.
func writeModuleFrame(w io.Writer, ko string) (int, error) {
	raw, err := os.ReadFile(ko)
	if err != nil {
		return 0, err
	}
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
	_, err = io.WriteString(w, b.String())
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

// CheckSharedModule gunzips gz and checks it is the module info describes
// (size and SHA-256). It returns the module's bytes.
func CheckSharedModule(gz []byte, info ModuleInfo) ([]byte, error) {
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
	sum := sha256.Sum256(raw)
	if got := hex.EncodeToString(sum[:]); got != info.SHA256 {
		return nil, &digestMismatch{got: got, want: info.SHA256}
	}
	if int64(len(raw)) != info.Size {
		return nil, fmt.Errorf("shared module has %d bytes, its record says %d", len(raw), info.Size)
	}
	return raw, nil
}

// fromCluster installs the module shared in dir (a ConfigMap volume) into
// the node's cache for (kernel, o.Version), after checking its record
// against what this node needs (version, kernel, the pinned commit), its
// bytes against the record, and the module itself with modinfo (version,
// vermagic), exactly as a module built here is checked.
func (x *execution) fromCluster(ctx context.Context, dir, cached string, o KMDOptions) (ModuleInfo, error) {
	var info ModuleInfo
	b, err := os.ReadFile(filepath.Join(dir, SharedInfoKey))
	if err != nil {
		return info, fmt.Errorf("shared module record: %w", err)
	}
	if err := json.Unmarshal(b, &info); err != nil || !sha256RE.MatchString(info.SHA256) {
		return info, fmt.Errorf("shared module record %s is unreadable", filepath.Join(dir, SharedInfoKey))
	}
	switch {
	case info.Version != o.Version:
		return info, fmt.Errorf("shared module is tt-kmd %q, not %s", info.Version, o.Version)
	case info.Kernel != x.res.Kernel:
		return info, fmt.Errorf("shared module was built for kernel %q, this node runs %s", info.Kernel, x.res.Kernel)
	case o.Commit != "" && info.Commit != o.Commit:
		return info, fmt.Errorf("shared module was built from commit %q, not the pinned %s", info.Commit, o.Commit)
	case info.Signer != o.signer:
		return info, fmt.Errorf("shared module is signed by certificate %q, this node signs with %q", orDash(info.Signer), orDash(o.signer))
	}
	gz, err := os.ReadFile(filepath.Join(dir, SharedModuleKey))
	if err != nil {
		return info, fmt.Errorf("shared module: %w", err)
	}
	raw, err := CheckSharedModule(gz, info)
	if err != nil {
		return info, err
	}
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		return info, err
	}
	// kmod's modinfo takes an argument for a file only when it ends in .ko
	// (else it looks up a module of that name and finds none).
	tmp := filepath.Join(filepath.Dir(cached), ".shared-"+filepath.Base(cached))
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return info, err
	}
	defer os.Remove(tmp)
	vermagic, err := x.checkBuilt(ctx, tmp, o.Version, x.res.Kernel)
	if err != nil {
		return info, err
	}
	if vermagic != info.Vermagic {
		return info, fmt.Errorf("shared module's vermagic is %q, its record says %q", vermagic, info.Vermagic)
	}
	if err := os.Rename(tmp, cached); err != nil {
		return info, err
	}
	info.Source = "cluster"
	return info, recordCached(cached, info)
}
