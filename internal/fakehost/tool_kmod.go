package fakehost

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

const moduleName = "tenstorrent"

func rmmod(t *tool) int {
	names := nonFlags(t.args)
	if len(names) != 1 || strings.TrimSuffix(names[0], ".ko") != moduleName {
		return t.errorf(1, "ERROR: fake rmmod only knows module %q, got %v", moduleName, names)
	}
	if loadedVersion(t.root) == "" {
		return t.errorf(1, "ERROR: Module %s is not currently loaded", moduleName)
	}
	if readTrimOr(t.root, modulesDisabledPath) == "1" {
		return t.errorf(1, "ERROR: could not remove module %s: Operation not permitted", moduleName)
	}
	if who := holdersNow(t.root); who != "" {
		// The kernel refuses; asking at all means nobody checked first.
		t.recordEvent(EventRmmodUnderHolder, "rmmod "+moduleName+" while the device is held ("+who+")")
		return t.errorf(1, "ERROR: Module %s is in use", moduleName)
	}
	v := loadedVersion(t.root)
	if err := unloadModule(t.root); err != nil {
		return t.errorf(1, "ERROR: %v", err)
	}
	t.recordOp(Op{Op: OpRmmod, Version: v})
	return 0
}

func insmod(t *tool) int {
	files := nonFlags(t.args)
	if len(files) < 1 {
		return t.errorf(1, "ERROR: missing filename")
	}
	if st, err := loadState(t.root); err == nil {
		time.Sleep(st.LoadDelay)
	}
	return t.loadFile(files[0], files[1:]...)
}

// loadFile is the finit_module part shared by insmod and modprobe; params
// are the module's NAME=VALUE arguments.
func (t *tool) loadFile(path string, params ...string) int {
	p, err := t.inRoot(path)
	if err != nil {
		return t.errorf(1, "ERROR: %v", err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return t.errorf(1, "ERROR: could not load module %s: No such file or directory", path)
	}
	st, err := loadState(t.root)
	if err != nil {
		return t.errorf(1, "ERROR: %v", err)
	}
	if readTrimOr(t.root, modulesDisabledPath) == "1" {
		return t.errorf(1, "ERROR: could not insert module %s: Operation not permitted", path)
	}
	// module_sig_check, before the module is parsed: a bad signature is
	// refused whatever the policy; an unsigned module or one by an unknown
	// key only under enforcement (EKEYREJECTED) or lockdown (EPERM).
	if err := checkModuleSig(b, st.trusted()); err != nil {
		switch lockdown := readTrimOr(t.root, lockdownPath); {
		case errors.Is(err, errBadSig), readTrimOr(t.root, sigEnforcePath) == "Y":
			return t.errorf(1, "ERROR: could not insert module %s: Key was rejected by service", path)
		case !strings.Contains(lockdown, "[none]") && lockdown != "":
			return t.errorf(1, "ERROR: could not insert module %s: Operation not permitted", path)
		}
	}
	version, vermagic, err := parseKernelObject(b)
	if err != nil {
		return t.errorf(1, "ERROR: could not insert module %s: Invalid module format", path)
	}
	if vermagic != st.Kernel {
		return t.errorf(1, "ERROR: could not insert module %s: Invalid module format (built for %s, running %s)", path, vermagic, st.Kernel)
	}
	if layoutRefused(t.root, st.Kernel, b) {
		return t.errorf(1, "ERROR: could not insert module %s: Invalid module format (disagrees about version of symbol "+
			"module_layout)", path)
	}
	if loadedVersion(t.root) != "" {
		return t.errorf(1, "ERROR: could not insert module %s: File exists", path)
	}
	if slices.Contains(st.UnresolvedKMD, version) {
		return t.errorf(1, "ERROR: could not insert module %s: Unknown symbol in module", path)
	}
	if err := loadModule(t.root, version, 0, st); err != nil {
		return t.errorf(1, "ERROR: %v", err)
	}
	if err := setSrcVersion(t.root, b); err != nil {
		return t.errorf(1, "ERROR: %v", err)
	}
	if err := writeModuleParams(t.root, params); err != nil {
		return t.errorf(1, "ERROR: %v", err)
	}
	sum := sha256.Sum256(b)
	t.recordOp(Op{Op: OpInsmod, Version: version, SHA256: hex.EncodeToString(sum[:])})
	return 0
}

// depmod -a [-b basedir] [version]: writes modules.dep, listing for each
// module name only the copy that wins: an override for it, else the first
// directory of the search order, which is the configuration's (depmod.d
// "search") or kmod's default, updates before the rest. Only a depmod run
// inside the host root (chroot) reads the host's depmod.d; with -b the
// configuration is the helper image's, which has none.
func depmod(t *tool) int {
	base, version := "/", ""
	for i := 0; i < len(t.args); i++ {
		switch a := t.args[i]; {
		case a == "-b" || a == "--basedir":
			if i+1 >= len(t.args) {
				return t.errorf(1, "ERROR: -b needs an argument")
			}
			i++
			base = t.args[i]
		case a == "-a" || a == "--all" || a == "-A":
		case strings.HasPrefix(a, "-"):
			return t.errorf(1, "ERROR: fake depmod does not support %s", a)
		default:
			version = a
		}
	}
	base, err := t.path(base)
	if err != nil {
		return t.errorf(1, "ERROR: %v", err)
	}
	if version == "" {
		st, err := loadState(t.root)
		if err != nil {
			return t.errorf(1, "ERROR: %v", err)
		}
		version = st.Kernel
	}
	cfg := depmodConfig{}
	if t.chrooted {
		if cfg, err = readDepmodConfig(t.root); err != nil {
			return t.errorf(1, "ERROR: %v", err)
		}
	}
	dir := filepath.Join(base, "lib/modules", version)
	winners := map[string]string{}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "build" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".ko") {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		name := filepath.Base(rel)
		if cur, ok := winners[name]; !ok || cfg.rank(version, rel) < cfg.rank(version, cur) {
			winners[name] = rel
		}
		return nil
	})
	if err != nil {
		return t.errorf(1, "ERROR: could not open directory %s: %v", dir, err)
	}
	lines := make([]string, 0, len(winners))
	for _, rel := range winners {
		lines = append(lines, rel+":")
	}
	sort.Strings(lines)
	if err := writeFileAtomic(filepath.Join(dir, "modules.dep"), []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		return t.errorf(1, "ERROR: %v", err)
	}
	return 0
}

// depmodConfig is what depmod.d says about the search order: "search" lines
// in order ("built-in" stands for every directory not named), and
// "override MODULE KVER DIR".
type depmodConfig struct {
	search    []string
	overrides []depmodOverride
}

type depmodOverride struct{ module, kernel, dir string }

// depmodConfigDirs are kmod's, in priority order (see configFiles).
var depmodConfigDirs = []string{"etc/depmod.d", "run/depmod.d", "usr/local/lib/depmod.d", "lib/depmod.d"}

func readDepmodConfig(root string) (depmodConfig, error) {
	files, err := configFiles(root, depmodConfigDirs)
	if err != nil {
		return depmodConfig{}, err
	}
	var cfg depmodConfig
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return depmodConfig{}, err
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) == 0 || strings.HasPrefix(f[0], "#"):
			case f[0] == "search":
				cfg.search = append(cfg.search, f[1:]...)
			case f[0] == "override" && len(f) == 4:
				cfg.overrides = append(cfg.overrides, depmodOverride{module: f[1], kernel: f[2], dir: f[3]})
			}
		}
	}
	return cfg, nil
}

// rank orders copies of one module (lower wins): an override's directory
// first, then the search order; among the rest ("built-in"), extra/ before
// the kernel's own tree.
func (c depmodConfig) rank(version, rel string) int {
	dir := filepath.Dir(rel)
	name := strings.TrimSuffix(filepath.Base(rel), ".ko")
	for _, o := range c.overrides {
		if o.module == name && (o.kernel == "*" || o.kernel == version) && dir == o.dir {
			return -1
		}
	}
	search := c.search
	if len(search) == 0 {
		search = []string{"updates", "built-in"}
	}
	builtin := len(search)
	for i, s := range search {
		if s == "built-in" {
			builtin = i
			continue
		}
		if dir == s || strings.HasPrefix(dir, s+"/") {
			return 2 * i
		}
	}
	if strings.HasPrefix(dir, "extra") {
		return 2 * builtin
	}
	return 2*builtin + 1
}

// modprobe [-d dir] [-S version] [--show-depends] name: resolves name via
// modules.dep; with --show-depends prints the insmod line (the path as the
// process sees it) instead of loading.
func modprobe(t *tool) int {
	base, version, show, name := "/", "", false, ""
	for i := 0; i < len(t.args); i++ {
		switch a := t.args[i]; a {
		case "-d", "--dirname", "-S", "--set-version":
			if i+1 >= len(t.args) {
				return t.errorf(1, "ERROR: %s needs an argument", a)
			}
			i++
			if a == "-d" || a == "--dirname" {
				base = t.args[i]
			} else {
				version = t.args[i]
			}
		case "--show-depends", "-D":
			show = true
		case "-c", "--showconfig", "--show-config":
			return t.showModprobeConfig()
		default:
			if strings.HasPrefix(a, "-") {
				return t.errorf(1, "ERROR: fake modprobe does not support %s", a)
			}
			name = a
		}
	}
	seen := base // the directory as the process names it
	base, err := t.path(base)
	if err != nil {
		return t.errorf(1, "FATAL: %v", err)
	}
	if version == "" {
		st, err := loadState(t.root)
		if err != nil {
			return t.errorf(1, "FATAL: %v", err)
		}
		version = st.Kernel
	}
	dir := filepath.Join(base, "lib/modules", version)
	rel, err := lookupModulesDep(dir, name)
	if err != nil {
		return t.errorf(1, "FATAL: Module %s not found in directory %s", name, filepath.Join(seen, "lib/modules", version))
	}
	if show {
		fmt.Fprintf(t.stdout, "insmod %s \n", filepath.Join(seen, "lib/modules", version, rel))
		return 0
	}
	if loadedVersion(t.root) != "" {
		return 0 // modprobe is a no-op for a loaded module
	}
	return t.loadFile(filepath.Join(dir, rel))
}

// modprobeConfigDirs are kmod's, in priority order (as depmodConfigDirs).
var modprobeConfigDirs = []string{"etc/modprobe.d", "run/modprobe.d", "usr/local/lib/modprobe.d", "lib/modprobe.d"}

// showModprobeConfig is `modprobe -c`'s options part: one "options MODULE
// REST" line per config line, REST as written after the module name and one
// blank. Only inside the host root is the configuration the host's.
func (t *tool) showModprobeConfig() int {
	if !t.chrooted {
		return 0
	}
	files, err := configFiles(t.root, modprobeConfigDirs)
	if err != nil {
		return t.errorf(1, "FATAL: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return t.errorf(1, "FATAL: %v", err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 || f[0] != "options" {
				continue
			}
			i := strings.Index(line, f[1]) + len(f[1]) + 1
			fmt.Fprintf(t.stdout, "options %s %s\n", f[1], line[i:])
		}
	}
	return 0
}

// configFiles are the *.conf files of kmod's configuration directories
// under root, sorted by name; a name in an earlier directory hides it in a
// later one.
func configFiles(root string, dirs []string) ([]string, error) {
	files := map[string]string{}
	for _, d := range dirs {
		entries, err := os.ReadDir(filepath.Join(root, d))
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		for _, e := range entries {
			if _, seen := files[e.Name()]; !seen && strings.HasSuffix(e.Name(), ".conf") {
				files[e.Name()] = filepath.Join(root, d, e.Name())
			}
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = files[n]
	}
	return out, nil
}

func lookupModulesDep(dir, name string) (string, error) {
	f, err := os.Open(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rel, _, _ := strings.Cut(sc.Text(), ":")
		if filepath.Base(rel) == name+".ko" {
			return rel, nil
		}
	}
	return "", fmt.Errorf("not found")
}

// kmdParams are tt-kmd's module parameters and their defaults, each shown
// in /sys/module/tenstorrent/parameters (tenstorrent/tt-kmd module.c:
// module_param with mode 0444 or 0644).
var kmdParams = map[string]string{
	"max_devices": "32", "dma_address_bits": "0", "reset_limit": "10", "auto_reset_timeout": "10",
	"power_policy": "Y", "idle_power_down_grace_ms": "5000",
}

// writeModuleParams shows the loaded module's parameters as the kernel
// does; an unknown one is ignored (the kernel only logs "unknown parameter
// ignored").
func writeModuleParams(root string, params []string) error {
	vals := maps.Clone(kmdParams)
	for _, p := range params {
		k, v, _ := strings.Cut(p, "=")
		if _, ok := vals[k]; ok {
			vals[k] = v
		}
	}
	for k, v := range vals {
		if err := writeFile(filepath.Join(root, moduleDir, "parameters", k), v+"\n"); err != nil {
			return err
		}
	}
	return nil
}

func nonFlags(args []string) []string {
	var out []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			out = append(out, a)
		}
	}
	return out
}

// modinfo -F FIELD FILE: prints one field of a module file as kmod's
// modinfo does (vermagic with the kernel's flags after the release; an
// absent field prints nothing and exits 0).
func modinfo(t *tool) int {
	field, file := "", ""
	for i := 0; i < len(t.args); i++ {
		switch a := t.args[i]; {
		case a == "-F" || a == "--field":
			if i+1 >= len(t.args) {
				return t.errorf(1, "option requires an argument -- 'F'")
			}
			i++
			field = t.args[i]
		case strings.HasPrefix(a, "--field="):
			field = strings.TrimPrefix(a, "--field=")
		case strings.HasPrefix(a, "-"):
			return t.errorf(1, "fake modinfo does not support %s", a)
		default:
			file = a
		}
	}
	if file == "" {
		return t.errorf(1, "ERROR: missing module or filename.")
	}
	p, err := t.path(file)
	if err != nil {
		return t.errorf(1, "ERROR: %v", err)
	}
	b, err := os.ReadFile(p)
	if err != nil || !strings.HasSuffix(file, ".ko") {
		// kmod reads a file only by a name ending in .ko (or .ko.xz, …);
		// any other argument is a module name to look up.
		return t.errorf(1, "ERROR: Module %s not found.", file)
	}
	version, kernel, err := parseKernelObject(b)
	if err != nil {
		return t.errorf(1, "ERROR: could not get modinfo from '%s': Invalid argument", strings.TrimSuffix(filepath.Base(file), ".ko"))
	}
	values := map[string]string{"version": version, "vermagic": kernel + " SMP preempt mod_unload modversions ", "name": moduleName,
		"license": "GPL"}
	if field == "" {
		fmt.Fprintf(t.stdout, "filename:       %s\nversion:        %s\nlicense:        GPL\nname:           %s\nvermagic:       %s\n", file,
			version, moduleName, values["vermagic"])
		return 0
	}
	if v, ok := values[field]; ok {
		fmt.Fprintln(t.stdout, v)
	}
	return 0
}

// readTrimOr reads a root-relative file, "" when absent.
func readTrimOr(root, rel string) string {
	v, err := readTrim(filepath.Join(root, rel))
	if err != nil {
		return ""
	}
	return v
}
