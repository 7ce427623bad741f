package nodeagent

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// The compiler a kernel was built with is the one its modules must be
// built with: kbuild passes the kernel's flags to it, and another gcc (an
// Ubuntu HWE kernel built by gcc-12 on a host whose gcc is 11) refuses
// them. The rules follow DKMS (dell/dkms, dkms.in, prepare_build and
// set_kernel_source_dir_and_kconfig):
//   - Debian's .kernelvariables names CC (make evaluates it);
//   - the kernel config, include/config/auto.conf else .config, names it
//     in CONFIG_CC_VERSION_TEXT's first word and wins when the host has it
//     (Ubuntu's headers name it there only);
//   - CONFIG_CC_IS_CLANG=y means clang, and kbuild wants LLVM=1.
// DKMS then exports CC; rollbook passes CC= to make, which overrides the
// kernel Makefile's own default of "gcc".

// kernelCompiler is the compiler that builds modules for a kernel.
type kernelCompiler struct {
	CC    string // "" when the tree names none: kbuild's default gcc
	Clang bool
	// Have says the host has CC (or, with none named, a gcc).
	Have bool
}

// makeArgs are the kbuild variables that select the compiler.
func (c kernelCompiler) makeArgs() []string {
	var args []string
	if c.CC != "" {
		args = append(args, "CC="+c.CC)
	}
	if c.Clang {
		args = append(args, "LLVM=1")
	}
	return args
}

// compilerFor reads the compiler buildDir (a kernel build tree under root)
// names, preferring the first of the config's and .kernelvariables' the
// host has; with neither present, the config's, and Have false.
func compilerFor(root, buildDir string) kernelCompiler {
	names, clang := configCompiler(buildDir)
	if cc := kernelVariablesCompiler(buildDir); cc != "" {
		names = append(names, cc)
	}
	if len(names) == 0 {
		return kernelCompiler{Have: hostToolchain(root)}
	}
	for _, cc := range names {
		if hostHas(root, cc) {
			return kernelCompiler{CC: cc, Clang: clang, Have: true}
		}
	}
	return kernelCompiler{CC: names[0], Clang: clang}
}

// compilerNameRE is a command name kbuild can run by PATH lookup; anything
// else (a path, make syntax, a distribution's banner) names nothing.
var compilerNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]*$`)

// configCompiler reads the kernel config's compiler: clang when
// CONFIG_CC_IS_CLANG=y, else the first word of CONFIG_CC_VERSION_TEXT
// (quoted in .config, bare in auto.conf).
func configCompiler(buildDir string) (names []string, clang bool) {
	f, err := os.Open(filepath.Join(buildDir, "include/config/auto.conf"))
	if err != nil {
		if f, err = os.Open(filepath.Join(buildDir, ".config")); err != nil {
			return nil, false
		}
	}
	defer f.Close()
	var text string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "CONFIG_CC_VERSION_TEXT="); ok {
			text = strings.Trim(v, `"`)
		}
		if line == "CONFIG_CC_IS_CLANG=y" {
			clang = true
		}
	}
	if clang {
		return []string{"clang"}, true
	}
	if w := strings.Fields(text); len(w) > 1 && compilerNameRE.MatchString(w[0]) {
		return []string{w[0]}, false
	}
	return nil, false
}

// ccRE finds Debian's compiler line in .kernelvariables, e.g.
// "CC = $(if $(DEBIAN_KERNEL_USE_CCACHE),$(CCACHE)) $(CROSS_COMPILE)gcc-12".
var ccRE = regexp.MustCompile(`(?m)^CC\s*=(.*)$`)

var makeVarRE = regexp.MustCompile(`\$\([^()]*\)`)

// kernelVariablesCompiler is the compiler Debian's .kernelvariables names
// ("" when there is none or it names none).
func kernelVariablesCompiler(buildDir string) string {
	b, err := os.ReadFile(filepath.Join(buildDir, ".kernelvariables"))
	if err != nil {
		return ""
	}
	m := ccRE.FindSubmatch(b)
	if m == nil {
		return ""
	}
	line := string(m[1])
	for makeVarRE.MatchString(line) { // innermost references first: $(if $(X),$(Y)) nests
		line = makeVarRE.ReplaceAllString(line, " ")
	}
	f := strings.Fields(line)
	if len(f) == 0 || !compilerNameRE.MatchString(f[len(f)-1]) {
		return ""
	}
	return f[len(f)-1]
}
