package nodeagent

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// defaultHostPATH is the PATH of a Debian or Ubuntu login without
// /etc/environment (login.defs' ENV_PATH for users, sbin included).
const defaultHostPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// HostSMI is a tt-smi on the host's PATH.
type HostSMI struct {
	// Path is where the host finds it (the PATH entry's spelling).
	Path string `json:"path"`
	// Owner is the package manager's package that installed it ("dpkg
	// package tt-smi", "pip tt_smi-6.2.1.dist-info in /usr/lib/python3/
	// dist-packages"); "" when no package claims it (rollbook's own copy).
	Owner string `json:"owner,omitempty"`
}

// hostPATH is the host's login PATH: /etc/environment's (pam_env reads it
// for every login on Debian and Ubuntu) when it sets one, else the
// default. Not the helper container's PATH.
func (a *Agent) hostPATH() []string {
	path := defaultHostPATH
	if f, err := os.Open(a.hostPath("etc/environment")); err == nil {
		s := bufio.NewScanner(f)
		for s.Scan() {
			line := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(s.Text()), "export "))
			if v, ok := strings.CutPrefix(line, "PATH="); ok {
				if v = strings.Trim(v, `"'`); v != "" {
					path = v
				}
			}
		}
		f.Close()
	}
	var out []string
	for _, d := range filepath.SplitList(path) {
		if filepath.IsAbs(d) {
			out = append(out, filepath.Clean(d))
		}
	}
	return out
}

// findHostSMI lists each tt-smi on the host's PATH in PATH order, once per
// file (merged /usr: /bin/tt-smi is /usr/bin/tt-smi), with its package.
func (a *Agent) findHostSMI() []HostSMI {
	var out []HostSMI
	seen := map[string]bool{}
	for _, d := range a.hostPATH() {
		p := filepath.Join(d, "tt-smi")
		full, err := resolveInRoot(a.Root, p)
		if err != nil {
			continue
		}
		real := "/" + strings.TrimPrefix(strings.TrimPrefix(full, filepath.Clean(a.Root)), "/")
		if seen[real] {
			continue
		}
		if fi, err := os.Stat(full); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			continue
		}
		seen[real] = true
		out = append(out, HostSMI{Path: p, Owner: a.packageOwner(p, real)})
	}
	return out
}

// packageOwner names the package that installed the file the host finds at
// p (real once symlinks are followed), "" when none: dpkg's file lists
// (/var/lib/dpkg/info/*.list, what `dpkg -S` reads), and pip's RECORD of a
// tt_smi distribution (tenstorrent/tt-smi pyproject.toml declares the
// tt-smi console script; pip lists it in RECORD relative to the
// site-packages directory).
func (a *Agent) packageOwner(p, real string) string {
	lists, _ := filepath.Glob(a.hostPath("var/lib/dpkg/info/*.list"))
	for _, l := range lists {
		if fileHasLine(l, p) || fileHasLine(l, real) {
			pkg, _, _ := strings.Cut(strings.TrimSuffix(filepath.Base(l), ".list"), ":")
			return "dpkg package " + pkg
		}
	}
	var records []string
	for _, pat := range []string{"usr/lib/python3*/dist-packages", "usr/lib/python3*/site-packages",
		"usr/local/lib/python3*/dist-packages", "usr/local/lib/python3*/site-packages", "usr/lib/python3/dist-packages"} {
		m, _ := filepath.Glob(a.hostPath(filepath.Join(pat, "tt_smi-*.dist-info", "RECORD")))
		records = append(records, m...)
	}
	for _, rec := range records {
		site := filepath.Dir(filepath.Dir(rec))
		f, err := os.Open(rec)
		if err != nil {
			continue
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			entry, _, _ := strings.Cut(s.Text(), ",")
			if !strings.HasSuffix(entry, "bin/tt-smi") {
				continue
			}
			host := "/" + strings.TrimPrefix(filepath.Clean(filepath.Join(site, entry)), filepath.Clean(a.Root))
			if filepath.Clean(host) == filepath.Clean(p) || filepath.Clean(host) == filepath.Clean(real) {
				f.Close()
				rel := strings.TrimPrefix(site, filepath.Clean(a.Root))
				return "pip " + filepath.Base(filepath.Dir(rec)) + " in " + rel
			}
		}
		f.Close()
	}
	return ""
}

func fileHasLine(path, line string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if s.Text() == line {
			return true
		}
	}
	return false
}

// packagedSMI is the first tt-smi on the host's PATH that a package
// manager owns; ok false when none does.
func packagedSMI(found []HostSMI) (HostSMI, bool) {
	for _, s := range found {
		if s.Owner != "" {
			return s, true
		}
	}
	return HostSMI{}, false
}

// PackagedSMIRefusal says why rollbook does not install tt-smi next to a
// package's: a copy at /usr/local/bin shadows /usr/bin's on every PATH
// (the package manager no longer decides which tt-smi runs, and its
// upgrades change nothing the host runs), and a rename over a package's
// own file leaves the package database lying (`dpkg --verify`, pip's
// RECORD) until its next upgrade silently puts the old one back.
func PackagedSMIRefusal(s HostSMI) string {
	return "the host's tt-smi at " + s.Path + " belongs to the " + s.Owner + "; rollbook's copy at /" + hostSMIPath +
		" would shadow or overwrite it. Upgrade it with the host's package manager (apt, pip), or remove the package " +
		"to let rollbook manage /" + hostSMIPath
}
