package nodeimage

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/ocilayout"
)

// A small root filesystem with what a real one has that a tar can get
// wrong: nested directories, a setuid file, a symlink, a hard link, a file
// made at build time (after the epoch) and one from a package (before).
type tree struct {
	dir   string
	pins  *Pins
	agent string
}

const testEpoch = 1796515200

var before = time.Unix(testEpoch-86400*30, 0)

func (tr *tree) write(t *testing.T, rel, content string, mode os.FileMode, mtime time.Time) {
	t.Helper()
	p := filepath.Join(tr.dir, rel)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), mode))
	require.NoError(t, os.Chmod(p, mode))
	require.NoError(t, os.Chtimes(p, mtime, mtime))
}

// newTree writes the tree; reverse creates its files in the opposite order
// (a file system's directory order then differs).
func newTree(t *testing.T, reverse bool) *tree {
	t.Helper()
	tr := &tree{dir: filepath.Join(t.TempDir(), "root")}
	status := "Package: base-files\nStatus: install ok installed\nArchitecture: amd64\nVersion: 12.4\n\n" +
		"Package: removed\nStatus: deinstall ok config-files\nArchitecture: amd64\nVersion: 1\n\n" +
		"Package: python3\nStatus: install ok installed\nArchitecture: amd64\nVersion: 3.11.2-1+b1\n"
	made := time.Now() // files made at build time, after the epoch
	if reverse {
		made = made.Add(37 * time.Minute)
	}
	files := []struct {
		rel, content string
		mode         os.FileMode
		mtime        time.Time
	}{
		{"usr/bin/python3", "#!elf python", 0o755, before},
		{"usr/bin/sudo", "sudo", 0o755 | os.ModeSetuid, before},
		{"usr/local/bin/tt-smi", standInMarker + ": tt-smi\n", 0o755, made},
		{"opt/rollbook/venv/bin/tt-flash", standInMarker + ": tt-flash\n", 0o755, made},
		{"etc/shadow", "root:*:20793:0:99999:7:::\n", 0o640, made},
		{"var/lib/dpkg/status", status, 0o644, made},
		{"usr/share/doc/python3/copyright", "PSF", 0o644, before},
	}
	if reverse {
		for i, j := 0, len(files)-1; i < j; i, j = i+1, j-1 {
			files[i], files[j] = files[j], files[i]
		}
	}
	for _, f := range files {
		tr.write(t, f.rel, f.content, f.mode, f.mtime)
	}
	// The setuid bit survives only chmod after the write, done above.
	require.NoError(t, os.Symlink("python3", filepath.Join(tr.dir, "usr/bin/python")))
	require.NoError(t, os.Link(filepath.Join(tr.dir, "usr/bin/python3"), filepath.Join(tr.dir, "usr/bin/python3.11")))
	require.NoError(t, os.MkdirAll(filepath.Join(tr.dir, "dev"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(tr.dir, "dev", "null-stand-in"), nil, 0o644)) // runtime dir: left out
	pins, err := ParsePins(strings.NewReader(fmt.Sprintf(`epoch %d
suite bookworm
snapshot 20261206T000000Z
tool tt-smi 6.2.1 /usr/local/bin/tt-smi https://example.com/tt-smi unverified
tool tt-flash 3.10.0 /opt/rollbook/venv/bin/tt-flash https://example.com/tt-flash unverified
deb base-files 12.4 amd64
deb python3 3.11.2-1+b1 amd64
`, testEpoch)))
	require.NoError(t, err)
	tr.pins = pins
	tr.agent = filepath.Join(t.TempDir(), "kubectl-tt")
	require.NoError(t, os.WriteFile(tr.agent, []byte("#!agent"), 0o700))
	return tr
}

func (tr *tree) build(t *testing.T, out string) *Result {
	t.Helper()
	res, err := Build(Options{Rootfs: tr.dir, Agent: tr.agent, Pins: tr.pins, Out: out, Version: "v1.2.3", Revision: "abcdef0"})
	require.NoError(t, err)
	return res
}

// Two builds of the same inputs, made at different times in a different
// order, give the same digest; the layout is a valid OCI image by
// go-containerregistry's own checks and names the digest ocilayout reads.
func TestSameInputsSameDigest(t *testing.T) {
	a, b := newTree(t, false), newTree(t, true)
	outA, outB := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	ra, rb := a.build(t, outA), b.build(t, outB)
	require.Equal(t, ra.Digest, rb.Digest)
	require.Equal(t, "ghcr.io/rollbook/node-agent:1.2.3", ra.Tag)
	require.Equal(t, "ghcr.io/rollbook/node-agent@"+ra.Digest, ra.Ref)

	ii, err := layout.ImageIndexFromPath(outA)
	require.NoError(t, err)
	im, err := ii.IndexManifest()
	require.NoError(t, err)
	require.Len(t, im.Manifests, 1)
	img, err := ii.Image(im.Manifests[0].Digest)
	require.NoError(t, err)
	require.NoError(t, validate.Image(img))

	got, err := ocilayout.Open(outA)
	require.NoError(t, err)
	require.Equal(t, ra.Digest, got.Digest)
	require.Equal(t, ra.Ref, got.Ref())
	require.Len(t, got.Layers, 2)
	require.Equal(t, "tt-smi,tt-flash", got.Config.Config.Labels[LabelStandIns])

	// Built again over itself: the same digest, and the layout left alone.
	before, err := os.Stat(filepath.Join(outA, "index.json"))
	require.NoError(t, err)
	require.Equal(t, ra.Digest, a.build(t, outA).Digest)
	after, err := os.Stat(filepath.Join(outA, "index.json"))
	require.NoError(t, err)
	require.True(t, os.SameFile(before, after), "an unchanged image was rewritten")
}

// Any change to what the image holds changes the digest, including the
// changes the base layer's cache must notice: content rewritten with its
// size and mtime kept, a mode, an owner, a link target, a new file.
func TestEveryChangeChangesTheDigest(t *testing.T) {
	tr := newTree(t, false)
	out := filepath.Join(t.TempDir(), "img")
	prev := tr.build(t, out).Digest
	seen := map[string]string{prev: "the first build"}
	python := filepath.Join(tr.dir, "usr/bin/python3")
	mutations := []struct {
		name string
		do   func() error
	}{
		{"content, same size and mtime", func() error {
			if err := os.WriteFile(python, []byte("#!elf pythoN"), 0o755); err != nil {
				return err
			}
			return os.Chtimes(python, before, before)
		}},
		{"mode", func() error { return os.Chmod(python, 0o750) }},
		{"setuid dropped", func() error { return os.Chmod(filepath.Join(tr.dir, "usr/bin/sudo"), 0o755) }},
		{"symlink target", func() error {
			p := filepath.Join(tr.dir, "usr/bin/python")
			if err := os.Remove(p); err != nil {
				return err
			}
			return os.Symlink("python3.11", p)
		}},
		{"a new file", func() error { return os.WriteFile(filepath.Join(tr.dir, "etc/new"), nil, 0o644) }},
		{"an mtime before the epoch", func() error {
			old := before.Add(-time.Hour)
			return os.Chtimes(filepath.Join(tr.dir, "usr/share/doc/python3/copyright"), old, old)
		}},
		{"the agent", func() error { return os.WriteFile(tr.agent, []byte("#!agenT"), 0o700) }},
	}
	if os.Geteuid() == 0 {
		mutations = append(mutations, struct {
			name string
			do   func() error
		}{"owner", func() error { return os.Lchown(python, 0, 4) }})
	}
	for _, m := range mutations {
		require.NoError(t, m.do(), m.name)
		d := tr.build(t, out).Digest
		if prev, dup := seen[d]; dup {
			t.Errorf("after %q the digest is the one of %q", m.name, prev)
		}
		seen[d], prev = m.name, d
	}
	// An mtime after the epoch is clamped to it: not a change.
	late := time.Now().Add(time.Hour)
	require.NoError(t, os.Chtimes(filepath.Join(tr.dir, "etc/shadow"), late, late))
	require.Equal(t, prev, tr.build(t, out).Digest, "an mtime after the epoch changed the digest")
}

// The root filesystem must be what the pins say.
func TestBuildRefusesARootOtherThanThePins(t *testing.T) {
	cases := []struct {
		name, want string
		do         func(tr *tree)
	}{
		{"another version", "python3: pinned 3.11.2-1+b1 amd64, installed 3.11.2-2", func(tr *tree) {
			tr.pins.Debs["python3"] = Deb{"python3", "3.11.2-1+b1", "amd64"}
			tr.rewriteStatus(t, "Version: 3.11.2-1+b1", "Version: 3.11.2-2")
		}},
		{"a package not pinned", "base-files: installed 12.4, not pinned", func(tr *tree) { delete(tr.pins.Debs, "base-files") }},
		{"a pinned package missing", "git: pinned 1:2.39.5, not installed", func(tr *tree) {
			tr.pins.Debs["git"] = Deb{"git", "1:2.39.5", "amd64"}
		}},
		{"a tool that is not the stand-in", "tool tt-smi at /usr/local/bin/tt-smi is pinned \"unverified\"", func(tr *tree) {
			tr.write(t, "usr/local/bin/tt-smi", "#!/bin/sh\nexec real\n", 0o755, before)
		}},
		{"a tool that is not the pinned artifact", "is not the pinned artifact", func(tr *tree) {
			tr.pins.Tools[0].SHA256 = strings.Repeat("0", 64)
		}},
		{"an agent in the root", "the root filesystem must not have one", func(tr *tree) {
			tr.write(t, "usr/local/bin/kubectl-tt", "old agent", 0o755, before)
		}},
		{"no root at all", "is not a root filesystem", func(tr *tree) { require.NoError(t, os.RemoveAll(filepath.Join(tr.dir, "usr/bin"))) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := newTree(t, false)
			c.do(tr)
			out := filepath.Join(t.TempDir(), "img")
			_, err := Build(Options{Rootfs: tr.dir, Agent: tr.agent, Pins: tr.pins, Out: out})
			require.ErrorContains(t, err, c.want)
			_, statErr := os.Stat(out)
			require.True(t, os.IsNotExist(statErr), "a refused build wrote %s", out)
		})
	}
}

func (tr *tree) rewriteStatus(t *testing.T, from, to string) {
	p := filepath.Join(tr.dir, "var/lib/dpkg/status")
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, []byte(strings.Replace(string(b), from, to, 1)), 0o644))
}
