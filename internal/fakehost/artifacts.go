package fakehost

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/rollbook/rollbook/pkg/ttflash"
)

// KernelObject is the content of a fake tenstorrent.ko built for kernel: an
// ELF64 relocatable object whose .modinfo section holds what kbuild puts
// there (NUL-terminated key=value strings: version, license, name,
// vermagic), so kmod's real modinfo and a .modinfo parser read it as they
// read a real module. The fake insmod reads the version from it and rejects
// a vermagic mismatch.
func KernelObject(version, kernel string) []byte { return KernelObjectFor(version, kernel, "") }

// KernelObjectFor is KernelObject built against a kernel whose config gives
// layout (LayoutCRC): like a module built with CONFIG_MODVERSIONS, it
// carries the CRC of module_layout in __versions, and the fake insmod
// refuses it on a kernel configured otherwise. "" leaves __versions out.
func KernelObjectFor(version, kernel, layout string) []byte {
	info := modinfoBytes([]string{"version=" + version, "license=GPL", "srcversion=" + fakeSrcVersion(version),
		"depends=", "retpoline=Y", "name=" + moduleName, "vermagic=" + kernel + " " + vermagicFlags})
	if layout == "" {
		return elfObject(elfSection{".modinfo", info})
	}
	return elfObject(elfSection{".modinfo", info}, elfSection{"__versions", modversion("module_layout", layout)})
}

// vermagicFlags follow the release in a Debian amd64 kernel's vermagic
// (include/linux/vermagic.h: SMP, preempt, mod_unload, modversions).
const vermagicFlags = "SMP preempt mod_unload modversions "

func fakeSrcVersion(version string) string {
	sum := sha256.Sum256([]byte("tt-kmd " + version))
	return strings.ToUpper(hex.EncodeToString(sum[:]))[:23]
}

// LayoutCRC is the fake kernel's CRC of module_layout for a config file's
// text: the kernel's config decides struct module's layout, so kernels
// configured otherwise have other CRCs. "" when it sets nothing.
func LayoutCRC(config []byte) string {
	var set []string
	for _, l := range strings.Split(string(config), "\n") {
		if name, value, ok := strings.Cut(strings.TrimSpace(l), "="); ok && strings.HasPrefix(name, "CONFIG_") {
			set = append(set, name+"="+strings.Trim(value, `"`))
		}
	}
	if len(set) == 0 {
		return ""
	}
	sort.Strings(set)
	sum := sha256.Sum256([]byte(strings.Join(set, "\n")))
	return hex.EncodeToString(sum[:4])
}

// modversion is one struct modversion_info of a 64-bit kernel: the CRC (8
// bytes) and the symbol's name (56 bytes, NUL-padded).
func modversion(symbol, crc string) []byte {
	out := make([]byte, 64)
	v, _ := strconv.ParseUint(crc, 16, 64)
	binary.LittleEndian.PutUint64(out, v)
	copy(out[8:63], symbol)
	return out
}

// moduleLayout is the module_layout CRC in a module's __versions ("" when
// it has none).
func moduleLayout(b []byte) string {
	f, err := elf.NewFile(bytes.NewReader(stripModuleSig(b)))
	if err != nil {
		return ""
	}
	sec := f.Section("__versions")
	if sec == nil {
		return ""
	}
	data, err := sec.Data()
	if err != nil {
		return ""
	}
	for ; len(data) >= 64; data = data[64:] {
		if string(bytes.TrimRight(data[8:64], "\x00")) == "module_layout" {
			return fmt.Sprintf("%08x", binary.LittleEndian.Uint64(data))
		}
	}
	return ""
}

// ELFModule is a minimal ELF64 (x86-64, little-endian) relocatable object
// with a .modinfo section of the given entries and its .shstrtab: what
// modinfo reads of a module (the ELF header, the section headers, the
// section names and .modinfo).
func ELFModule(modinfo []string) []byte {
	return elfObject(elfSection{".modinfo", modinfoBytes(modinfo)})
}

func modinfoBytes(entries []string) []byte {
	var info []byte
	for _, kv := range entries {
		info = append(append(info, kv...), 0)
	}
	return info
}

type elfSection struct {
	name string
	data []byte
}

// elfObject lays out the sections (SHT_PROGBITS, SHF_ALLOC) after the ELF
// header, then .shstrtab, then the section headers.
func elfObject(sections ...elfSection) []byte {
	shstr := []byte{0}
	names := make([]uint32, len(sections))
	for i, s := range sections {
		names[i] = uint32(len(shstr))
		shstr = append(append(shstr, s.name...), 0)
	}
	strName := uint32(len(shstr))
	shstr = append(shstr, ".shstrtab\x00"...)
	const ehsize, shentsize = 64, 64
	offs := make([]uint64, len(sections))
	off := uint64(ehsize)
	for i, s := range sections {
		offs[i] = off
		off += uint64(len(s.data))
	}
	strOff := off
	shoff := (strOff + uint64(len(shstr)) + 7) &^ 7
	shnum := len(sections) + 2
	out := make([]byte, shoff+uint64(shnum)*shentsize)
	copy(out, []byte{0x7f, 'E', 'L', 'F', 2 /* 64-bit */, 1 /* LSB */, 1 /* EV_CURRENT */})
	le := binary.LittleEndian
	le.PutUint16(out[16:], 1)  // ET_REL
	le.PutUint16(out[18:], 62) // EM_X86_64
	le.PutUint32(out[20:], 1)  // EV_CURRENT
	le.PutUint64(out[40:], shoff)
	le.PutUint16(out[52:], ehsize)
	le.PutUint16(out[58:], shentsize)
	le.PutUint16(out[60:], uint16(shnum))   // e_shnum
	le.PutUint16(out[62:], uint16(shnum-1)) // e_shstrndx
	header := func(i int, name, typ uint32, flags, off, size uint64) {
		h := out[shoff+uint64(i)*shentsize:]
		le.PutUint32(h[0:], name)
		le.PutUint32(h[4:], typ)
		le.PutUint64(h[8:], flags)
		le.PutUint64(h[24:], off)
		le.PutUint64(h[32:], size)
		le.PutUint64(h[48:], 1) // sh_addralign
	}
	for i, s := range sections {
		copy(out[offs[i]:], s.data)
		header(i+1, names[i], 1 /* SHT_PROGBITS */, 2 /* SHF_ALLOC */, offs[i], uint64(len(s.data)))
	}
	copy(out[strOff:], shstr)
	header(shnum-1, strName, 3 /* SHT_STRTAB */, 0, strOff, uint64(len(shstr)))
	return out
}

func parseKernelObject(b []byte) (version, kernel string, err error) {
	b = stripModuleSig(b)
	if !bytes.HasPrefix(b, []byte(elf.ELFMAG)) {
		return "", "", fmt.Errorf("invalid module format")
	}
	return parseELFModule(b)
}

// parseELFModule reads version and the vermagic's kernel release from a
// real module's .modinfo section (NUL-separated key=value strings, what
// modinfo prints): on a real-host node the fake insmod loads what kbuild
// really built.
func parseELFModule(b []byte) (version, kernel string, err error) {
	info, err := modinfoOf(b)
	if err != nil {
		return "", "", err
	}
	version = info["version"]
	if fs := strings.Fields(info["vermagic"]); len(fs) > 0 {
		kernel = fs[0]
	}
	if version == "" || kernel == "" {
		return "", "", fmt.Errorf("invalid module format: no version or vermagic")
	}
	return version, kernel, nil
}

// modinfoOf is a module's .modinfo, its last value of each key.
func modinfoOf(b []byte) (map[string]string, error) {
	f, err := elf.NewFile(bytes.NewReader(stripModuleSig(b)))
	if err != nil {
		return nil, fmt.Errorf("invalid module format: %w", err)
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("invalid module format: no .modinfo")
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("invalid module format: %w", err)
	}
	info := map[string]string{}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if k, v, ok := strings.Cut(string(kv), "="); ok {
			info[k] = v
		}
	}
	return info, nil
}

// TTSMIEnv names the fake tt-smi tool a tt-smi file hands all but --version
// to, when set (the sim's helpers, where the image's tt-smi is that file).
const TTSMIEnv = "FAKEHOST_TTSMI"

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
		// Inside a helper the sim puts the fake card tool here (the image's
		// tt-smi is this file): snapshots and resets go to it.
		"[ -n \"$" + TTSMIEnv + "\" ] && exec \"$" + TTSMIEnv + "\" \"$@\"\n" +
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

// bundleBoards maps tt-smi's board_type to the directory tt-flash reads a
// board's image from (its get_board_type names).
var bundleBoards = map[string]string{
	"n150": "NEBULA_X1", "n300": "NEBULA_X2", "p100": "P100A-1", "p150": "P150A-1", "p300": "P300A-1",
	"tt-galaxy-wh": "WH_UBB", "tt-galaxy-bh": "GALAXY-1",
}

// WriteBundle writes a .fwbundle for version (a.b.c) with an image for
// every board type the fake knows.
func WriteBundle(path, version string) error {
	boards := make([]string, 0, len(bundleBoards))
	for b := range bundleBoards {
		boards = append(boards, b)
	}
	sort.Strings(boards)
	return WriteBundleFor(path, version, boards...)
}

// WriteBundleFor writes a .fwbundle as tt-system-firmware ships one: a tar
// with ./manifest.json — "version" is the manifest's own schema version,
// "bundle_version" {fwId, releaseId, patch, debug} the firmware's — and
// ./<BOARD>/image.bin and mask.json per board type (tt-smi names).
func WriteBundleFor(path, version string, boards ...string) error {
	parts := strings.Split(version, ".")
	if len(parts) != 3 {
		return fmt.Errorf("bundle version %q: want a.b.c", version)
	}
	nums := make([]int, 3)
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return fmt.Errorf("bundle version %q: %w", version, err)
		}
		nums[i] = n
	}
	// tt-flash validates manifest 2.0.0 bundles to fwId >= 19; older
	// firmware shipped 1.x manifests.
	schema := "1.0.0"
	if nums[0] >= 19 {
		schema = "2.0.0"
	}
	manifest, err := json.Marshal(map[string]any{"version": schema,
		"bundle_version": map[string]int{"fwId": nums[0], "releaseId": nums[1], "patch": nums[2], "debug": 0}})
	if err != nil {
		return err
	}
	files := [][2]string{{"./manifest.json", string(manifest)}}
	for _, b := range boards {
		dir, ok := bundleBoards[b]
		if !ok {
			return fmt.Errorf("bundle: unknown board type %q", b)
		}
		files = append(files, [2]string{"./" + dir + "/image.bin", "fake image " + version + " for " + dir + "\n"},
			[2]string{"./" + dir + "/mask.json", "[]\n"})
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f[0], Mode: 0o644, Size: int64(len(f[1]))}); err != nil {
			return err
		}
		if _, err := tw.Write([]byte(f[1])); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// fwBundle is what tt-flash reads from a bundle.
type fwBundle struct {
	version string          // bundle_version, 4 parts
	boards  map[string]bool // directories with an image.bin
}

// readBundle reads the manifest and the per-board images as tt-flash does
// (ttflash.ReadBundle, which the probe reads bundles with too).
func readBundle(path string) (fwBundle, error) {
	b := fwBundle{boards: map[string]bool{}}
	f, err := os.Open(path)
	if err != nil {
		return b, err
	}
	defer f.Close()
	read, err := ttflash.ReadBundle(f)
	if err != nil {
		return b, fmt.Errorf("%s: %w", path, err)
	}
	b.version = read.Version
	for _, d := range read.Boards {
		b.boards[d] = true
	}
	return b, nil
}
