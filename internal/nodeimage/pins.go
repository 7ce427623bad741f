// Package nodeimage builds the node-agent helper image: an OCI image whose
// layers are the root filesystem hack/image-rootfs.sh builds (the one the
// sim runs every helper in) and the static kubectl-tt, written as an OCI
// layout. The build is reproducible: entries sorted, modes and owners as
// they are, every mtime clamped to the pins' epoch, the config's times the
// epoch; the same root filesystem, agent and pins give the same digest.
//
// The pins (build/node-agent.pins) are everything the image takes from
// outside this repository. Build refuses a root filesystem whose Debian
// packages or tools differ from them.
package nodeimage

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// PinsFile is the pins' path in the repository.
const PinsFile = "build/node-agent.pins"

// Unverified is a tool's SHA256 when its real artifact's digest is not
// known: the build installs a stand-in, and the image says so (LabelStandIns).
const Unverified = "unverified"

// Pins are the image's inputs from outside the repository.
type Pins struct {
	// Epoch is SOURCE_DATE_EPOCH: the image's created time, and the
	// latest mtime any file in it has.
	Epoch int64
	// Suite is the Debian suite the root filesystem is bootstrapped from.
	Suite string
	// Snapshot is the snapshot.debian.org time the deb records were taken
	// at (hack/image-rootfs.sh's mirror where it is reachable).
	Snapshot string
	// Debs are every package dpkg records as installed, by name.
	Debs map[string]Deb
	// Tools are what the image holds that is not a Debian package.
	Tools []Tool
}

// Deb is one installed Debian package.
type Deb struct {
	Name, Version, Arch string
}

// Tool is an artifact installed at Path from Source, checked by SHA256
// (64 hex digits), or Unverified: then a stand-in is at Path.
type Tool struct {
	Name, Version, Path, Source, SHA256 string
}

// StandIn reports whether the image carries a stand-in for t.
func (t Tool) StandIn() bool { return t.SHA256 == Unverified }

var (
	debName  = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`)
	debVer   = regexp.MustCompile(`^[0-9A-Za-z.+~:-]+$`)
	debArch  = regexp.MustCompile(`^(all|amd64)$`)
	toolName = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)
	semver   = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)
	hex64    = regexp.MustCompile(`^[0-9a-f]{64}$`)
	suiteRe  = regexp.MustCompile(`^[a-z]+$`)
	stampRe  = regexp.MustCompile(`^[0-9]{8}T[0-9]{6}Z$`)
)

// ReadPins reads and validates a pins file.
func ReadPins(file string) (*Pins, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	p, err := ParsePins(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return p, nil
}

// ParsePins reads pins: one record a line, fields separated by blanks,
// '#' to the end of a line is a comment. Every field is validated: a pin
// reaches a shell and a URL fetch.
func ParsePins(r io.Reader) (*Pins, error) {
	p := &Pins{Debs: map[string]Deb{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if err := p.record(f); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	switch {
	case p.Epoch == 0:
		return nil, fmt.Errorf("no epoch record")
	case p.Suite == "":
		return nil, fmt.Errorf("no suite record")
	case p.Snapshot == "":
		return nil, fmt.Errorf("no snapshot record")
	case len(p.Debs) == 0:
		return nil, fmt.Errorf("no deb records")
	}
	return p, nil
}

func (p *Pins) record(f []string) error {
	want := map[string]int{"epoch": 2, "suite": 2, "snapshot": 2, "deb": 4, "tool": 6}
	n, ok := want[f[0]]
	if !ok {
		return fmt.Errorf("unknown record %q (epoch, suite, snapshot, deb, tool)", f[0])
	}
	if len(f) != n {
		return fmt.Errorf("%s takes %d fields, not %d", f[0], n-1, len(f)-1)
	}
	switch f[0] {
	case "epoch":
		e, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil || e <= 0 || p.Epoch != 0 {
			return fmt.Errorf("epoch %q: one record, seconds since 1970", f[1])
		}
		p.Epoch = e
	case "suite":
		if !suiteRe.MatchString(f[1]) || p.Suite != "" {
			return fmt.Errorf("suite %q: one record, a Debian suite name", f[1])
		}
		p.Suite = f[1]
	case "snapshot":
		if !stampRe.MatchString(f[1]) || p.Snapshot != "" {
			return fmt.Errorf("snapshot %q: one record, YYYYMMDDTHHMMSSZ", f[1])
		}
		p.Snapshot = f[1]
	case "deb":
		d := Deb{f[1], f[2], f[3]}
		if !debName.MatchString(d.Name) || !debVer.MatchString(d.Version) || !debArch.MatchString(d.Arch) {
			return fmt.Errorf("deb %q %q %q: not a package name, version and architecture (all, amd64)", d.Name, d.Version, d.Arch)
		}
		if _, dup := p.Debs[d.Name]; dup {
			return fmt.Errorf("deb %s twice", d.Name)
		}
		p.Debs[d.Name] = d
	case "tool":
		t := Tool{f[1], f[2], f[3], f[4], f[5]}
		if err := t.validate(); err != nil {
			return err
		}
		for _, o := range p.Tools {
			if o.Name == t.Name || o.Path == t.Path {
				return fmt.Errorf("tool %s: name or path twice", t.Name)
			}
		}
		p.Tools = append(p.Tools, t)
	}
	return nil
}

func (t Tool) validate() error {
	switch {
	case !toolName.MatchString(t.Name):
		return fmt.Errorf("tool name %q", t.Name)
	case !semver.MatchString(t.Version):
		return fmt.Errorf("tool %s: version %q is not X.Y.Z", t.Name, t.Version)
	case !path.IsAbs(t.Path) || path.Clean(t.Path) != t.Path || strings.ContainsAny(t.Path, " '\"$\\"):
		return fmt.Errorf("tool %s: path %q is not a clean absolute path", t.Name, t.Path)
	case !strings.HasPrefix(t.Source, "https://") && !strings.HasPrefix(t.Source, "file:///"):
		return fmt.Errorf("tool %s: source %q is not an https:// or file:/// URL", t.Name, t.Source)
	case strings.ContainsAny(t.Source, " '\"$\\`"):
		return fmt.Errorf("tool %s: source %q has shell metacharacters", t.Name, t.Source)
	case t.SHA256 != Unverified && !hex64.MatchString(t.SHA256):
		return fmt.Errorf("tool %s: sha256 %q is neither 64 hex digits nor %q", t.Name, t.SHA256, Unverified)
	}
	return nil
}

// StandIns names the tools the image carries stand-ins for.
func (p *Pins) StandIns() []string {
	var out []string
	for _, t := range p.Tools {
		if t.StandIn() {
			out = append(out, t.Name)
		}
	}
	return out
}

// Tool returns the tool called name.
func (p *Pins) Tool(name string) (Tool, bool) {
	for _, t := range p.Tools {
		if t.Name == name {
			return t, true
		}
	}
	return Tool{}, false
}
