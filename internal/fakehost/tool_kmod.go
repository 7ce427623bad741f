package fakehost

import (
	"bufio"
	"fmt"
	"io/fs"
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
	return t.loadFile(files[0])
}

// loadFile is the finit_module part shared by insmod and modprobe.
func (t *tool) loadFile(path string) int {
	p, err := t.inRoot(path)
	if err != nil {
		return t.errorf(1, "ERROR: %v", err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return t.errorf(1, "ERROR: could not load module %s: No such file or directory", path)
	}
	version, vermagic, err := parseKernelObject(b)
	if err != nil {
		return t.errorf(1, "ERROR: could not insert module %s: Invalid module format", path)
	}
	st, err := loadState(t.root)
	if err != nil {
		return t.errorf(1, "ERROR: %v", err)
	}
	if vermagic != st.Kernel {
		return t.errorf(1, "ERROR: could not insert module %s: Invalid module format (built for %s, running %s)", path, vermagic, st.Kernel)
	}
	if loadedVersion(t.root) != "" {
		return t.errorf(1, "ERROR: could not insert module %s: File exists", path)
	}
	// The kernel's policy for an unsigned module (finit_module errors).
	switch {
	case readTrimOr(t.root, modulesDisabledPath) == "1":
		return t.errorf(1, "ERROR: could not insert module %s: Operation not permitted", path)
	case readTrimOr(t.root, sigEnforcePath) == "Y":
		return t.errorf(1, "ERROR: could not insert module %s: Key was rejected by service", path)
	case !strings.Contains(readTrimOr(t.root, lockdownPath), "[none]") && readTrimOr(t.root, lockdownPath) != "":
		return t.errorf(1, "ERROR: could not insert module %s: Operation not permitted", path)
	case slices.Contains(st.UnresolvedKMD, version):
		return t.errorf(1, "ERROR: could not insert module %s: Unknown symbol in module", path)
	}
	if err := loadModule(t.root, version, 0, st); err != nil {
		return t.errorf(1, "ERROR: %v", err)
	}
	t.recordOp(Op{Op: OpInsmod, Version: version})
	return 0
}

// depmod -a [-b basedir] [version]: writes modules.dep, listing for each
// module name only the copy that wins by search order (updates > extra >
// kernel), which is what modprobe then loads.
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
	base, err := t.inRoot(base)
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
		if cur, ok := winners[name]; !ok || searchRank(rel) < searchRank(cur) {
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

func searchRank(rel string) int {
	switch strings.SplitN(rel, string(filepath.Separator), 2)[0] {
	case "updates":
		return 0
	case "extra":
		return 1
	default:
		return 2
	}
}

// modprobe [-d dir] [-S version] [--show-depends] name: resolves name via
// modules.dep; with --show-depends prints the insmod line instead of loading.
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
		default:
			if strings.HasPrefix(a, "-") {
				return t.errorf(1, "ERROR: fake modprobe does not support %s", a)
			}
			name = a
		}
	}
	base, err := t.inRoot(base)
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
		return t.errorf(1, "FATAL: Module %s not found in directory %s", name, dir)
	}
	path := filepath.Join(dir, rel)
	if show {
		fmt.Fprintf(t.stdout, "insmod %s \n", path)
		return 0
	}
	if loadedVersion(t.root) != "" {
		return 0 // modprobe is a no-op for a loaded module
	}
	return t.loadFile(path)
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
