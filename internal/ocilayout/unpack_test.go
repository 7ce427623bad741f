package ocilayout_test

import (
	"archive/tar"
	"bytes"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rollbook/rollbook/internal/ocilayout"
	"github.com/rollbook/rollbook/internal/ocilayout/ocitest"
)

// writeLayout writes a one-layer layout of the tar entries by hand, as an
// attacker (or a broken builder) could.
func writeLayout(t *testing.T, entries []tar.Header, contents map[string]string) *ocilayout.Image {
	t.Helper()
	dir := t.TempDir()
	d := ocitest.Write(t, dir, "registry.example:5000/x/agent:1.0", nil, ocitest.Layer{Entries: entries, Contents: contents})
	im, err := ocilayout.Open(dir)
	require.NoError(t, err)
	require.Equal(t, d, im.Digest)
	return im
}

var epoch = time.Unix(1796515200, 0)

func TestUnpackKeepsWhatTheTarSays(t *testing.T) {
	im := writeLayout(t, []tar.Header{
		{Name: "usr/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch},
		{Name: "usr/bin/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch},
		{Name: "usr/bin/sudo", Typeflag: tar.TypeReg, Mode: 0o4755, Uid: 0, Gid: 0, ModTime: epoch.Add(-time.Hour)},
		{Name: "usr/bin/python3", Typeflag: tar.TypeReg, Mode: 0o755, Uid: 7, Gid: 8, ModTime: epoch},
		{Name: "usr/bin/python3.11", Typeflag: tar.TypeLink, Linkname: "usr/bin/python3", ModTime: epoch},
		{Name: "usr/bin/python", Typeflag: tar.TypeSymlink, Linkname: "python3", ModTime: epoch},
	}, map[string]string{"usr/bin/sudo": "sudo", "usr/bin/python3": "py"})
	require.Equal(t, "registry.example:5000/x/agent", im.Repository())
	dest := filepath.Join(t.TempDir(), "layer")
	require.NoError(t, im.Unpack(im.Layers[0], dest))
	fi, err := os.Stat(filepath.Join(dest, "usr/bin/sudo"))
	require.NoError(t, err)
	require.Equal(t, fs.ModeSetuid|0o755, fi.Mode())
	require.True(t, fi.ModTime().Equal(epoch.Add(-time.Hour)))
	py, _ := os.Stat(filepath.Join(dest, "usr/bin/python3"))
	py11, _ := os.Stat(filepath.Join(dest, "usr/bin/python3.11"))
	require.True(t, os.SameFile(py, py11), "the hard link is a hard link")
	if os.Geteuid() == 0 {
		st := py.Sys().(*syscall.Stat_t)
		require.Equal(t, [2]uint32{7, 8}, [2]uint32{st.Uid, st.Gid})
	}
	l, err := os.Readlink(filepath.Join(dest, "usr/bin/python"))
	require.NoError(t, err)
	require.Equal(t, "python3", l)
	d, _ := os.Stat(filepath.Join(dest, "usr/bin"))
	require.True(t, d.ModTime().Equal(epoch), "a directory's time is set after its entries")
}

// A layer whose bytes are not its digest, or whose entries reach outside
// it, unpacks nothing.
func TestUnpackRefuses(t *testing.T) {
	dir := tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}
	cases := map[string][]tar.Header{
		"a name with ..":            {{Name: "../escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"an absolute name":          {{Name: "/escape", Typeflag: tar.TypeReg, Mode: 0o644}},
		"a symlinked parent":        {{Name: "etc", Typeflag: tar.TypeSymlink, Linkname: "/tmp"}, {Name: "etc/escape", Typeflag: tar.TypeReg}},
		"a hard link outside":       {dir, {Name: "etc/passwd", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"}},
		"a whiteout":                {dir, {Name: "etc/.wh.shadow", Typeflag: tar.TypeReg}},
		"a device":                  {dir, {Name: "etc/null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}},
		"a file written twice over": {dir, {Name: "etc/x", Typeflag: tar.TypeReg}, {Name: "etc/x", Typeflag: tar.TypeReg}},
	}
	for name, entries := range cases {
		t.Run(name, func(t *testing.T) {
			im := writeLayout(t, entries, nil)
			parent := t.TempDir()
			dest := filepath.Join(parent, "layer")
			require.Error(t, im.Unpack(im.Layers[0], dest))
			left, _ := os.ReadDir(parent)
			require.Empty(t, left, "a refused layer left files behind")
		})
	}
	other := "sha256:" + hex.EncodeToString(make([]byte, 32))
	for what, tamper := range map[string]func(im *ocilayout.Image, l *ocilayout.Layer){
		"the blob's digest": func(im *ocilayout.Image, l *ocilayout.Layer) { // another blob under the layer's name
			require.NoError(t, os.Rename(im.BlobPath(l.Digest), im.BlobPath(other)))
			l.Digest = other
		},
		"the tar's digest": func(_ *ocilayout.Image, l *ocilayout.Layer) { l.DiffID = other },
		"unexpected EOF": func(im *ocilayout.Image, l *ocilayout.Layer) { // a blob cut short
			b, err := os.ReadFile(im.BlobPath(l.Digest))
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(im.BlobPath(l.Digest), b[:len(b)-9], 0o644))
		},
	} {
		t.Run("not matching "+what, func(t *testing.T) {
			im := writeLayout(t, []tar.Header{dir, {Name: "etc/x", Typeflag: tar.TypeReg, Mode: 0o644}}, map[string]string{"etc/x": "abc"})
			l := im.Layers[0]
			tamper(im, &l)
			parent := t.TempDir()
			require.ErrorContains(t, im.Unpack(l, filepath.Join(parent, "layer")), what)
			left, _ := os.ReadDir(parent)
			require.Empty(t, left)
		})
	}
}

// Open checks the manifest and config against their digests.
func TestOpenRefusesATamperedManifest(t *testing.T) {
	im := writeLayout(t, []tar.Header{{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755}}, nil)
	p := im.BlobPath(im.Digest)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, bytes.Replace(b, []byte(`"schemaVersion":2`), []byte(`"schemaVersion":3`), 1), 0o644))
	_, err = ocilayout.Open(im.Dir)
	require.ErrorContains(t, err, "does not match its digest")
}
