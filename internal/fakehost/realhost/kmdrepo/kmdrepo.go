// Package kmdrepo writes the git remote of the stand-in tt-kmd that the
// real-host tests and the sim's real-host nodes clone: a real kernel module
// named tenstorrent (written for rollbook, not tt-kmd's code), one tag
// ttkmd-<v> per version whose MODULE_VERSION is v. It runs this machine's
// git.
package kmdrepo

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Write creates dir/src (the work tree) and dir/tt-kmd.git (the bare
// remote, one commit and tag per version, in order) and returns the
// remote's file:// URL.
func Write(dir string, versions ...string) (string, error) {
	gitPath, err := SystemTool("git")
	if err != nil {
		return "", err
	}
	src, bare := filepath.Join(dir, "src"), filepath.Join(dir, "tt-kmd.git")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	git := func(args ...string) error {
		cmd := exec.Command(gitPath, args...)
		cmd.Dir = src
		// Nothing of the caller's git configuration or identity applies.
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=rollbook", "GIT_AUTHOR_EMAIL=test@rollbook.dev",
			"GIT_COMMITTER_NAME=rollbook", "GIT_COMMITTER_EMAIL=test@rollbook.dev", "GIT_CONFIG_NOSYSTEM=1", "HOME="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %v: %v\n%s", args, err, out)
		}
		return nil
	}
	if err := git("init", "-q", "-b", "main"); err != nil {
		return "", err
	}
	for _, v := range versions {
		files := map[string]string{"Makefile": moduleMakefile, "module.c": fmt.Sprintf(moduleSource, v)}
		for name, content := range files {
			if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
				return "", err
			}
		}
		for _, args := range [][]string{{"add", "-A"}, {"commit", "-q", "-m", "tt-kmd stand-in " + v}, {"tag", "ttkmd-" + v}} {
			if err := git(args...); err != nil {
				return "", err
			}
		}
	}
	if err := git("clone", "-q", "--bare", src, bare); err != nil {
		return "", err
	}
	return "file://" + bare, nil
}

// SystemTool finds this machine's own name in the system directories,
// never on PATH (tests put fake tools there).
func SystemTool(name string) (string, error) {
	for _, d := range []string{"/usr/bin", "/bin", "/usr/sbin", "/sbin"} {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s in this machine's system directories", name)
}

// The stand-in module: it only has to build with kbuild and carry the
// version.
const moduleMakefile = "obj-m += tenstorrent.o\ntenstorrent-y := module.o\n"

const moduleSource = `// Stand-in for tt-kmd in rollbook's real-host tests.
#include <linux/module.h>
#include <linux/init.h>

static int __init standin_init(void) { return 0; }
static void __exit standin_exit(void) { }
module_init(standin_init);
module_exit(standin_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("rollbook stand-in for tt-kmd");
MODULE_VERSION("%s");
`
