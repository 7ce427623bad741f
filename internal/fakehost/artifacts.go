package fakehost

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

const koMagic = "FAKEKO"

// KernelObject is the content of a fake tenstorrent.ko built for kernel; the
// fake insmod reads the version from it and rejects a vermagic mismatch.
func KernelObject(version, kernel string) []byte {
	return []byte(fmt.Sprintf("%s name=tenstorrent version=%s vermagic=%s\n", koMagic, version, kernel))
}

func parseKernelObject(b []byte) (version, kernel string, err error) {
	fields := strings.Fields(string(b))
	if len(fields) == 0 || fields[0] != koMagic {
		return "", "", fmt.Errorf("invalid module format")
	}
	for _, f := range fields[1:] {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "version":
			version = v
		case "vermagic":
			kernel = v
		}
	}
	if version == "" || kernel == "" {
		return "", "", fmt.Errorf("invalid module format")
	}
	return version, kernel, nil
}

// WriteTTSMIBinary writes a stand-in for the tt-smi PyInstaller binary of
// the ubuntu-22.04 flavour (needs glibc DefaultGlibc).
func WriteTTSMIBinary(path, version string) error {
	return WriteTTSMIBinaryFor(path, version, DefaultGlibc)
}

// WriteTTSMIBinaryFor writes a stand-in for the tt-smi PyInstaller binary
// built against glibc: an executable that answers `--version` like the real
// one (bare version). Run directly it uses the caller's libc, as a binary
// in a helper container uses the image's; run through the fake chroot it
// needs the host's glibc to be at least glibc, as the real binary does.
func WriteTTSMIBinaryFor(path, version, glibc string) error {
	script := "#!/bin/sh\n# fake tt-smi " + version + " (rollbook fakehost)\n# needs GLIBC_" + glibc + "\n" +
		"case \"$1\" in -v|--version) echo " + version + "; exit 0 ;; esac\n" +
		"echo 'fake tt-smi: only --version is supported here' >&2\nexit 2\n"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(script), 0o755)
}

var (
	scriptVersion = regexp.MustCompile(`# fake tt-smi (\S+)`)
	scriptGlibc   = regexp.MustCompile(`# needs GLIBC_(\S+)`)
)

// ttsmiBinaryVersion reads the version of a fake tt-smi without running it.
func ttsmiBinaryVersion(path string) string {
	v, _ := ttsmiBinary(path)
	return v
}

// ttsmiBinary reads the version and the glibc a fake tt-smi needs; ""
// when path is not one.
func ttsmiBinary(path string) (version, glibc string) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", ""
	}
	m := scriptVersion.FindSubmatch(b)
	if m == nil {
		return "", ""
	}
	glibc = DefaultGlibc
	if g := scriptGlibc.FindSubmatch(b); g != nil {
		glibc = string(g[1])
	}
	return string(m[1]), glibc
}

// hostSMIPath is the host's tt-smi, relative to the root.
const hostSMIPath = "usr/local/bin/tt-smi"

// libcPath is the host's C library; its content names the glibc release.
const libcPath = "lib/x86_64-linux-gnu/libc.so.6"

func libcContent(release string) string {
	return "GNU C Library (fake) stable release version " + release + ".\n"
}

var libcRelease = regexp.MustCompile(`release version ([0-9.]+)`)

// hostGlibc is the glibc release of the host at root ("" if unknown).
func hostGlibc(root string) string {
	b, err := os.ReadFile(filepath.Join(root, libcPath))
	if err != nil {
		return ""
	}
	if m := libcRelease.FindSubmatch(b); m != nil {
		return string(m[1])
	}
	return ""
}

// glibcAtLeast compares dotted glibc releases numerically.
func glibcAtLeast(have, need string) bool {
	h, n := strings.Split(have, "."), strings.Split(need, ".")
	for i := 0; i < max(len(h), len(n)); i++ {
		var a, b int
		if i < len(h) {
			a, _ = strconv.Atoi(h[i])
		}
		if i < len(n) {
			b, _ = strconv.Atoi(n[i])
		}
		if a != b {
			return a > b
		}
	}
	return true
}

// WriteBundle writes a minimal .fwbundle: a tar whose ./manifest.json holds
// the 3-int bundle version, as tt-flash expects.
func WriteBundle(path, version string) error {
	parts := strings.Split(version, ".")
	nums := make([]int, 0, len(parts))
	for _, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return fmt.Errorf("bundle version %q: %w", version, err)
		}
		nums = append(nums, n)
	}
	manifest, err := json.Marshal(map[string]any{"version": nums})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "./manifest.json", Mode: 0o644, Size: int64(len(manifest))}); err != nil {
		return err
	}
	if _, err := tw.Write(manifest); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// bundleVersion returns the manifest version as "a.b.c".
func bundleVersion(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return "", fmt.Errorf("%s: no manifest.json in bundle", path)
		}
		if err != nil {
			return "", fmt.Errorf("%s: not a firmware bundle: %w", path, err)
		}
		if strings.TrimPrefix(h.Name, "./") != "manifest.json" {
			continue
		}
		var m struct {
			Version []int `json:"version"`
		}
		if err := json.NewDecoder(tr).Decode(&m); err != nil {
			return "", fmt.Errorf("manifest.json: %w", err)
		}
		if len(m.Version) != 3 {
			return "", fmt.Errorf("manifest.json: version must be 3 ints, got %v", m.Version)
		}
		return fmt.Sprintf("%d.%d.%d", m.Version[0], m.Version[1], m.Version[2]), nil
	}
}
