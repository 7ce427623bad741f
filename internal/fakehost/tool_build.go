package fakehost

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// git clone [--depth N] [--branch TAG] [-q] URL DIR: "clones" tt-kmd at TAG
// by writing a source tree whose MODULE_VERSION is the tag's version;
// git -C DIR rev-parse HEAD prints the clone's commit.
func git(t *tool) int {
	args := t.args
	for len(args) >= 2 && args[0] == "-c" { // git -c key=value clone …
		args = args[2:]
	}
	if len(args) == 4 && args[0] == "-C" && args[2] == "rev-parse" && args[3] == "HEAD" {
		return gitRevParse(t, args[1])
	}
	if len(args) > 0 && args[0] == "ls-remote" {
		return gitLsRemote(t, args[1:])
	}
	if len(args) == 0 || args[0] != "clone" {
		return t.errorf(129, "fake git only supports clone, ls-remote and -C DIR rev-parse HEAD, got %v", t.args)
	}
	var branch string
	var pos []string
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--branch" || a == "-b" || a == "--depth":
			if i+1 >= len(args) {
				return t.errorf(129, "option %s requires a value", a)
			}
			i++
			if a != "--depth" {
				branch = args[i]
			}
		case strings.HasPrefix(a, "--depth="):
		case strings.HasPrefix(a, "--branch="):
			branch = strings.TrimPrefix(a, "--branch=")
		case strings.HasPrefix(a, "-"):
		default:
			pos = append(pos, a)
		}
	}
	if len(pos) != 2 {
		return t.errorf(129, "usage: git clone [--depth 1] --branch <tag> <url> <dir>")
	}
	dir, err := t.inRoot(pos[1])
	if err != nil {
		return t.errorf(128, "fatal: %v", err)
	}
	st, err := loadState(t.root)
	if err != nil {
		return t.errorf(128, "fatal: %v", err)
	}
	version, ok := strings.CutPrefix(branch, "ttkmd-")
	if !ok || !slices.Contains(RemoteTags, branch) || slices.Contains(st.MissingTags, branch) {
		fmt.Fprintf(t.stderr, "Cloning into '%s'...\n", dir)
		return t.errorf(128, "fatal: Remote branch %s not found in upstream origin", branch)
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return t.errorf(128, "fatal: destination path '%s' already exists and is not an empty directory.", dir)
	}
	files := map[string]string{
		"Makefile": "obj-m += tenstorrent.o\n",
		"module.c": "MODULE_VERSION(\"" + version + "\");\n",
		// A clone of a tag is a detached HEAD at the tag's commit.
		".git/HEAD": FakeCommit(branch) + "\n",
	}
	for name, content := range files {
		if err := writeFile(filepath.Join(dir, name), content); err != nil {
			return t.errorf(128, "fatal: %v", err)
		}
	}
	fmt.Fprintf(t.stderr, "Cloning into '%s'...\n", dir)
	return 0
}

// RemoteTags are the tags the fake tt-kmd remote has: tt-kmd's release tags
// from 1.29 (before 2.0 upstream tagged two parts, ttkmd-1.34) through
// 2.10.0, the releases the simulated fleet's story moves between (2.8.1 and
// 2.9.1 are the story's), and 1.29.0–1.34.0, three-part stand-ins the
// older tests use. Any other version (a typo, 99.0.0) is not there, as
// upstream.
var RemoteTags = func() []string {
	var out []string
	for _, v := range []string{"1.29", "1.30", "1.31", "1.32", "1.33", "1.34",
		"1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0", "1.34.0",
		"2.0.0", "2.1.0", "2.2.0", "2.3.0", "2.4.0", "2.4.1", "2.5.0",
		"2.6.0", "2.7.0", "2.8.0", "2.8.1", "2.9.0", "2.9.1", "2.10.0"} {
		out = append(out, "ttkmd-"+v)
	}
	return out
}()

var kernelCCRE = regexp.MustCompile(`(?m)^CC\s*=.*?([A-Za-z0-9_.+-]*gcc[A-Za-z0-9_.+-]*)\s*$`)

var moduleVersionRE = regexp.MustCompile(`MODULE_VERSION\("([^"]+)"\)`)

// make [-jN] -C KDIR M=SRC modules: the kbuild out-of-tree module build.
func makeModules(t *tool) int {
	var kdir, src, cc string
	var targets []string
	for i := 0; i < len(t.args); i++ {
		switch a := t.args[i]; {
		case strings.HasPrefix(a, "CC="):
			cc = strings.TrimPrefix(a, "CC=")
		case strings.HasPrefix(a, "LLVM="):
		case a == "-C":
			if i+1 >= len(t.args) {
				return t.errorf(2, "option requires an argument -- 'C'")
			}
			i++
			kdir = t.args[i]
		case a == "-j":
			i++ // the job count
		case strings.HasPrefix(a, "M="):
			src = strings.TrimPrefix(a, "M=")
		case strings.HasPrefix(a, "-"):
		default:
			targets = append(targets, a)
		}
	}
	if !slices.Equal(targets, []string{"modules"}) || kdir == "" || src == "" {
		return t.errorf(2, "*** fake make only supports: make -C <kdir> M=<src> modules")
	}
	shownKdir := kdir
	kdir, err := t.path(kdir)
	if err != nil {
		return t.errorf(2, "*** %v", err)
	}
	src, err = t.path(src)
	if err != nil {
		return t.errorf(2, "*** %v", err)
	}
	fmt.Fprintf(t.stdout, "make: Entering directory '%s'\n", shownKdir)
	mk, err := os.ReadFile(filepath.Join(kdir, "Makefile"))
	if err != nil {
		return t.errorf(2, "*** %s: No such file or directory.  Stop.", shownKdir)
	}
	// Absolute includes (Debian's split header trees) resolve as the
	// process sees the filesystem: inside the chroot, the host's paths.
	for _, line := range strings.Split(string(mk), "\n") {
		inc, ok := strings.CutPrefix(line, "include /")
		if !ok {
			continue
		}
		at := "/" + inc
		if t.chrooted {
			at = filepath.Join(t.root, at)
		}
		if _, err := os.Stat(at); err != nil {
			return t.errorf(2, "Makefile:1: /%s: No such file or directory\n*** No rule to make target '/%s'.  Stop.", inc, inc)
		}
	}
	kernel, err := readTrim(filepath.Join(kdir, "include/config/kernel.release"))
	if err != nil {
		return t.errorf(2, "*** kernel build tree %s is incomplete: %v", kdir, err)
	}
	st, err := loadState(t.root)
	if err != nil {
		return t.errorf(2, "*** %v", err)
	}
	if code := t.checkCompiler(kdir, shownKdir, src, cc); code != 0 {
		return code
	}
	if st.BrokenBuild {
		fmt.Fprintf(t.stdout, "  CC [M]  %s/module.o\n", src)
		fmt.Fprintln(t.stderr, "/bin/sh: 1: gcc-12: not found")
		return t.errorf(2, "*** [scripts/Makefile.build:243: %s/module.o] Error 127", src)
	}
	code, err := os.ReadFile(filepath.Join(src, "module.c"))
	if err != nil {
		return t.errorf(2, "*** No rule to make target '%s/module.c'.  Stop.", src)
	}
	m := moduleVersionRE.FindSubmatch(code)
	if m == nil {
		return t.errorf(2, "*** %s/module.c has no MODULE_VERSION", src)
	}
	time.Sleep(st.BuildDelay)
	// With CONFIG_MODVERSIONS the module carries the CRCs of the tree's
	// config: module_layout's, which the loader checks.
	conf, _ := os.ReadFile(filepath.Join(kdir, "include/config/auto.conf"))
	ko := KernelObjectFor(string(m[1]), kernel, LayoutCRC(conf))
	if err := os.WriteFile(filepath.Join(src, "tenstorrent.ko"), ko, 0o644); err != nil {
		return t.errorf(2, "*** %v", err)
	}
	fmt.Fprintf(t.stdout, "  CC [M]  %s/module.o\n  LD [M]  %s/tenstorrent.ko\n", src, src)
	fmt.Fprintf(t.stdout, "make: Leaving directory '%s'\n", kdir)
	return 0
}

// checkCompiler runs kbuild's compiler as the real one does: CC= on the
// command line, else Debian's .kernelvariables, else the Makefile's "gcc",
// run by name from the host's PATH; a compiler other than the one the
// kernel config's CONFIG_CC_VERSION_TEXT names gets the warning kbuild
// prints and the failure the kernel's flags then cause (an Ubuntu HWE
// kernel built by gcc-12, built against with gcc-11). The same file under
// another name (gcc → gcc-12) is the same compiler.
func (t *tool) checkCompiler(kdir, shownKdir, src, cc string) int {
	if cc == "" {
		cc = "gcc"
		if vars, err := os.ReadFile(filepath.Join(kdir, ".kernelvariables")); err == nil {
			if m := kernelCCRE.FindSubmatch(vars); m != nil {
				cc = string(m[1])
			}
		}
	}
	used, ok := t.compiler(cc)
	if !ok {
		fmt.Fprintf(t.stdout, "  CC [M]  %s/module.o\n", src)
		fmt.Fprintf(t.stderr, "/bin/sh: 1: %s: not found\n", cc)
		return t.errorf(2, "*** [%s] Error 2", shownKdir)
	}
	built := ""
	if conf, err := os.ReadFile(filepath.Join(kdir, "include/config/auto.conf")); err == nil {
		if m := configCCRE.FindSubmatch(conf); m != nil {
			built = string(m[1])
		}
	}
	if built == "" {
		return 0
	}
	if want, ok := t.compiler(strings.Fields(built)[0]); ok && os.SameFile(used, want) {
		return 0
	}
	fmt.Fprintf(t.stderr, "warning: the compiler differs from the one used to build the kernel\n"+
		"  The kernel was built by: %s\n  You are using:           %s (fake)\n", built, cc)
	fmt.Fprintf(t.stdout, "  CC [M]  %s/module.o\n", src)
	fmt.Fprintf(t.stderr, "%s: error: unrecognized command-line option '-ftrivial-auto-var-init=zero'\n", cc)
	return t.errorf(2, "*** [scripts/Makefile.build:243: %s/module.o] Error 1", src)
}

// compiler finds a compiler by name on the host's /usr/bin.
func (t *tool) compiler(name string) (os.FileInfo, bool) {
	at, err := t.path(filepath.Join("/usr/bin", name))
	if err != nil {
		return nil, false
	}
	fi, err := os.Stat(at)
	return fi, err == nil
}

var configCCRE = regexp.MustCompile(`(?m)^CONFIG_CC_VERSION_TEXT="?([^"\n]+)"?$`)

// git ls-remote URL [PATTERN…]: the remote's tags whose name ends with a
// pattern at a "/" boundary, as git matches them, one "<commit>\t<ref>" a
// line; none matching is exit 0 with no output. The fake's tags are
// lightweight (no peeled "^{}" lines).
func gitLsRemote(t *tool, args []string) int {
	var pos []string
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			pos = append(pos, a)
		}
	}
	if len(pos) == 0 {
		return t.errorf(128, "fatal: No remote configured to list refs from.")
	}
	st, err := loadState(t.root)
	if err != nil {
		return t.errorf(128, "fatal: %v", err)
	}
	for _, tag := range RemoteTags {
		if slices.Contains(st.MissingTags, tag) {
			continue
		}
		ref := "refs/tags/" + tag
		match := len(pos) == 1
		for _, p := range pos[1:] {
			match = match || ref == p || strings.HasSuffix(ref, "/"+p)
		}
		if match {
			fmt.Fprintf(t.stdout, "%s\t%s\n", FakeCommit(tag), ref)
		}
	}
	return 0
}

// FakeCommit is the commit fake git's tag resolves to: stable per tag, as a
// real remote's is until someone moves the tag.
func FakeCommit(tag string) string {
	sum := sha1.Sum([]byte("tt-kmd " + tag))
	return hex.EncodeToString(sum[:])
}

// gitRevParse prints the commit checked out in dir, as git does for a
// detached HEAD; outside a clone it fails as git does.
func gitRevParse(t *tool, dir string) int {
	d, err := t.inRoot(dir)
	if err != nil {
		return t.errorf(128, "fatal: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(d, ".git/HEAD"))
	if err != nil {
		return t.errorf(128, "fatal: not a git repository (or any of the parent directories): .git")
	}
	fmt.Fprintln(t.stdout, strings.TrimSpace(string(b)))
	return 0
}
