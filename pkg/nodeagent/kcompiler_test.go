package nodeagent

import (
	"os"
	"path/filepath"
	"testing"
)

func TestCompilerForFollowsDKMS(t *testing.T) {
	cases := []struct {
		name     string
		files    map[string]string // under the build tree
		host     []string          // compilers in the host's /usr/bin
		want     kernelCompiler
		wantMake []string
	}{
		{"ubuntu HWE: the config alone names it", map[string]string{
			"include/config/auto.conf": "CONFIG_CC_VERSION_TEXT=x86_64-linux-gnu-gcc-12 (Ubuntu 12.3.0-1ubuntu1~22.04) 12.3.0\n"},
			[]string{"gcc", "x86_64-linux-gnu-gcc-12"},
			kernelCompiler{CC: "x86_64-linux-gnu-gcc-12", Have: true}, []string{"CC=x86_64-linux-gnu-gcc-12"}},
		{"the config's name, quoted in .config", map[string]string{
			".config": "CONFIG_CC_VERSION_TEXT=\"gcc (Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0\"\n"},
			[]string{"gcc"}, kernelCompiler{CC: "gcc", Have: true}, []string{"CC=gcc"}},
		{"auto.conf wins over .config", map[string]string{
			"include/config/auto.conf": "CONFIG_CC_VERSION_TEXT=gcc-13 (x) 13\n", ".config": "CONFIG_CC_VERSION_TEXT=\"gcc-12 (x) 12\"\n"},
			[]string{"gcc-12", "gcc-13"}, kernelCompiler{CC: "gcc-13", Have: true}, []string{"CC=gcc-13"}},
		{"missing: refused, named", map[string]string{
			"include/config/auto.conf": "CONFIG_CC_VERSION_TEXT=x86_64-linux-gnu-gcc-12 (Ubuntu 12.3.0) 12.3.0\n"},
			[]string{"gcc"}, kernelCompiler{CC: "x86_64-linux-gnu-gcc-12"}, []string{"CC=x86_64-linux-gnu-gcc-12"}},
		{"the config's missing, .kernelvariables' present (DKMS keeps it)", map[string]string{
			"include/config/auto.conf": "CONFIG_CC_VERSION_TEXT=x86_64-linux-gnu-gcc-12 (Debian 12.2.0) 12.2.0\n",
			".kernelvariables":         "CC = $(if $(DEBIAN_KERNEL_USE_CCACHE),$(CCACHE)) $(CROSS_COMPILE)gcc-12\n"},
			[]string{"gcc-12"}, kernelCompiler{CC: "gcc-12", Have: true}, []string{"CC=gcc-12"}},
		{"clang: its banner is not a command", map[string]string{
			"include/config/auto.conf": "CONFIG_CC_VERSION_TEXT=Ubuntu clang version 18.1.3 (1ubuntu1)\nCONFIG_CC_IS_CLANG=y\n"},
			[]string{"clang"}, kernelCompiler{CC: "clang", Clang: true, Have: true}, []string{"CC=clang", "LLVM=1"}},
		{"a path or make syntax names nothing", map[string]string{
			"include/config/auto.conf": "CONFIG_CC_VERSION_TEXT=/opt/cross/bin/gcc (x) 12\n",
			".kernelvariables":         "CC = $(CROSS_COMPILE)\n"},
			[]string{"gcc"}, kernelCompiler{Have: true}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			build := filepath.Join(root, "usr/src/linux-headers-x")
			for f, body := range c.files {
				writeTestFile(t, filepath.Join(build, f), body)
			}
			writeTestFile(t, filepath.Join(root, "usr/bin/make"), "")
			for _, cc := range c.host {
				writeTestFile(t, filepath.Join(root, "usr/bin", cc), "")
			}
			got := compilerFor(root, build)
			if got != c.want {
				t.Errorf("compilerFor = %+v, want %+v", got, c.want)
			}
			if m := got.makeArgs(); len(m) != len(c.wantMake) || (len(m) > 0 && m[len(m)-1] != c.wantMake[len(c.wantMake)-1]) {
				t.Errorf("make arguments %q, want %q", m, c.wantMake)
			}
		})
	}
}

func writeTestFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
}
