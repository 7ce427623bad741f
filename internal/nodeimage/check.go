package nodeimage

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// standInMarker starts every stand-in hack/image-rootfs.sh writes.
const standInMarker = "#!/bin/sh\n# STAND-IN written by hack/image-rootfs.sh"

// CheckRootfs refuses a root filesystem that is not what the pins say:
// another set of Debian packages or versions (dpkg's status), a tool that
// is not its pinned artifact (or, unverified, not a stand-in), or an agent
// already in place (the image's top layer holds it).
func CheckRootfs(rootfs string, p *Pins) error {
	if fi, err := os.Stat(filepath.Join(rootfs, "usr/bin")); err != nil || !fi.IsDir() {
		return fmt.Errorf("%s is not a root filesystem (no usr/bin); hack/image-rootfs.sh builds it", rootfs)
	}
	installed, err := dpkgStatus(filepath.Join(rootfs, "var/lib/dpkg/status"))
	if err != nil {
		return err
	}
	if diff := debDiff(p.Debs, installed); len(diff) > 0 {
		return fmt.Errorf("%s holds other Debian packages than %s pins (hack/image-rootfs.sh checks them when it builds; "+
			"was it built from another pins file?):\n  %s", rootfs, PinsFile, strings.Join(diff, "\n  "))
	}
	for _, t := range p.Tools {
		if err := checkTool(rootfs, t); err != nil {
			return err
		}
	}
	if _, err := os.Lstat(filepath.Join(rootfs, AgentPath)); err == nil {
		return fmt.Errorf("%s holds %s: the image's top layer is the agent, the root filesystem must not have one "+
			"(built by an older hack/image-rootfs.sh? run it again)", rootfs, AgentPath)
	}
	return nil
}

func checkTool(rootfs string, t Tool) error {
	f, err := os.Open(filepath.Join(rootfs, t.Path))
	if err != nil {
		return fmt.Errorf("tool %s: %w", t.Name, err)
	}
	defer f.Close()
	h := sha256.New()
	head := &bytes.Buffer{}
	if _, err := io.Copy(io.MultiWriter(h, &limited{head, len(standInMarker)}), f); err != nil {
		return fmt.Errorf("tool %s: %w", t.Name, err)
	}
	standIn := head.String() == standInMarker
	switch {
	case t.StandIn() && !standIn:
		return fmt.Errorf("tool %s at %s is pinned %q but is not hack/image-rootfs.sh's stand-in", t.Name, t.Path, Unverified)
	case !t.StandIn() && hex.EncodeToString(h.Sum(nil)) != t.SHA256:
		return fmt.Errorf("tool %s at %s is not the pinned artifact (sha256 %s, pinned %s)", t.Name, t.Path,
			hex.EncodeToString(h.Sum(nil)), t.SHA256)
	}
	return nil
}

// limited keeps the first n bytes written to it.
type limited struct {
	b *bytes.Buffer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// dpkgStatus reads dpkg's status file: the installed packages by name.
func dpkgStatus(file string) (map[string]Deb, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("no dpkg status (not a Debian root filesystem?): %w", err)
	}
	defer f.Close()
	out := map[string]Deb{}
	var d Deb
	var status string
	flush := func() {
		if d.Name != "" && status == "install ok installed" {
			out[d.Name] = d
		}
		d, status = Deb{}, ""
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			flush()
			continue
		}
		k, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		switch k {
		case "Package":
			d.Name = v
		case "Version":
			d.Version = v
		case "Architecture":
			d.Arch = v
		case "Status":
			status = v
		}
	}
	flush()
	return out, sc.Err()
}

// debDiff lists how installed differs from pinned, sorted.
func debDiff(pinned, installed map[string]Deb) []string {
	var out []string
	for n, p := range pinned {
		switch i, ok := installed[n]; {
		case !ok:
			out = append(out, fmt.Sprintf("%s: pinned %s, not installed", n, p.Version))
		case i != p:
			out = append(out, fmt.Sprintf("%s: pinned %s %s, installed %s %s", n, p.Version, p.Arch, i.Version, i.Arch))
		}
	}
	for n, i := range installed {
		if _, ok := pinned[n]; !ok {
			out = append(out, fmt.Sprintf("%s: installed %s, not pinned", n, i.Version))
		}
	}
	sort.Strings(out)
	return out
}
