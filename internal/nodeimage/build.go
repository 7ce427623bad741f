package nodeimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/gzip"

	"github.com/rollbook/rollbook/internal/ocilayout"
	"github.com/rollbook/rollbook/pkg/nodeagent"
	"github.com/rollbook/rollbook/pkg/version"
)

// Repository is where the release pushes the image.
const Repository = "ghcr.io/rollbook/node-agent"

// AgentPath is where the image holds the agent (the helper pods' command
// is `kubectl-tt node-agent …`, found on PATH).
const AgentPath = "/usr/local/bin/kubectl-tt"

// Labels of the image config.
const (
	LabelVersion  = "org.opencontainers.image.version"
	LabelRevision = "org.opencontainers.image.revision"
	LabelSource   = "org.opencontainers.image.source"
	LabelLicenses = "org.opencontainers.image.licenses"
	// LabelStandIns names the tools the image holds stand-ins for
	// (comma-separated); a release refuses an image that has it.
	LabelStandIns = "dev.rollbook.node-agent.stand-ins"
)

// Options are the inputs of one build.
type Options struct {
	Rootfs string // hack/image-rootfs.sh's root filesystem
	Agent  string // the static kubectl-tt
	Pins   *Pins
	Out    string // the OCI layout written; replaced whole
	// Version and Revision label the image; Version also names its tag
	// (ref.name ghcr.io/rollbook/node-agent:<version without v>).
	Version, Revision string
}

// Result is what Build wrote.
type Result struct {
	Digest string // sha256:… of the image manifest
	Ref    string // Repository@Digest
	Tag    string // Repository:<version>
}

// Build writes the image of opts.Rootfs and opts.Agent to opts.Out, after
// checking the root filesystem against the pins.
func Build(opts Options) (*Result, error) {
	if err := CheckRootfs(opts.Rootfs, opts.Pins); err != nil {
		return nil, err
	}
	epoch := time.Unix(opts.Pins.Epoch, 0).UTC()
	tmp, err := os.MkdirTemp(filepath.Dir(opts.Out), ".build-"+filepath.Base(opts.Out)+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	base, baseKey, err := baseLayer(tmp, opts.Rootfs, opts.Out, epoch)
	if err != nil {
		return nil, fmt.Errorf("the root filesystem's layer: %w", err)
	}
	agent, err := writeLayer(tmp, epoch, func(t *treeWriter) error {
		name := strings.TrimPrefix(AgentPath, "/")
		if err := t.parentDirs(opts.Rootfs, name); err != nil {
			return err
		}
		return t.file(opts.Agent, name, 0o755)
	})
	if err != nil {
		return nil, fmt.Errorf("the agent's layer: %w", err)
	}
	img, err := image(opts, epoch, base, agent)
	if err != nil {
		return nil, err
	}
	tag := Repository + ":" + tagOf(opts.Version)
	staged := filepath.Join(tmp, "layout")
	p, err := layout.Write(staged, empty.Index)
	if err != nil {
		return nil, err
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{ocilayout.AnnotationRefName: tag})); err != nil {
		return nil, err
	}
	d, err := img.Digest()
	if err != nil {
		return nil, err
	}
	if err := replaceLayout(staged, opts.Out); err != nil {
		return nil, err
	}
	if err := saveBaseKey(opts.Out, baseKey, base); err != nil {
		return nil, err
	}
	return &Result{Digest: d.String(), Ref: Repository + "@" + d.String(), Tag: tag}, nil
}

// tagOf is the image tag of a version: without its "v", "devel" when unset.
func tagOf(version string) string {
	if version == "" {
		return "devel"
	}
	return strings.TrimPrefix(version, "v")
}

func image(opts Options, epoch time.Time, layers ...*builtLayer) (v1.Image, error) {
	labels := map[string]string{
		LabelSource:   "https://github.com/rollbook/rollbook",
		LabelLicenses: "Apache-2.0",
		LabelVersion:  tagOf(opts.Version),
	}
	if opts.Revision != "" {
		labels[LabelRevision] = opts.Revision
	}
	if s := opts.Pins.StandIns(); len(s) > 0 {
		labels[LabelStandIns] = strings.Join(s, ",")
	}
	cfg := &v1.ConfigFile{
		Architecture: version.HelperArch,
		OS:           version.HelperOS,
		Created:      v1.Time{Time: epoch},
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			Env:    []string{"PATH=" + nodeagent.ImagePATH},
			Cmd:    []string{"kubectl-tt", "node-agent", "--help"},
			Labels: labels,
		},
	}
	img, err := mutate.ConfigFile(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON), cfg)
	if err != nil {
		return nil, err
	}
	createdBy := []string{
		"hack/image-rootfs.sh: Debian " + opts.Pins.Suite + " (debootstrap, build/packages.txt at the versions of " + PinsFile +
			") and its tools",
		"kubectl-tt " + tagOf(opts.Version) + " at " + AgentPath,
	}
	for i, l := range layers {
		h := v1.History{Created: v1.Time{Time: epoch}, CreatedBy: createdBy[i]}
		img, err = mutate.Append(img, mutate.Addendum{Layer: l, History: h})
		if err != nil {
			return nil, err
		}
	}
	return img, nil
}

// builtLayer is a gzip-compressed layer blob in a file, hashed as written.
type builtLayer struct {
	path         string
	digest, diff v1.Hash
	size         int64
}

var _ v1.Layer = (*builtLayer)(nil)

func (l *builtLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *builtLayer) DiffID() (v1.Hash, error)            { return l.diff, nil }
func (l *builtLayer) Size() (int64, error)                { return l.size, nil }
func (l *builtLayer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
func (l *builtLayer) Compressed() (io.ReadCloser, error)  { return os.Open(l.path) }
func (l *builtLayer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	return readCloser{zr, f}, nil
}

type readCloser struct {
	io.Reader
	f *os.File
}

func (r readCloser) Close() error { return r.f.Close() }

// writeLayer writes the tar stream fill produces, gzip-compressed, to a
// file in dir, hashing the tar (diff ID) and the blob (digest) in one pass.
func writeLayer(dir string, epoch time.Time, fill func(*treeWriter) error) (*builtLayer, error) {
	f, err := os.CreateTemp(dir, "layer-")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	blobHash, tarHash := sha256.New(), sha256.New()
	counted := &countWriter{w: io.MultiWriter(f, blobHash)}
	zw, err := gzip.NewWriterLevel(counted, gzip.DefaultCompression)
	if err != nil {
		return nil, err
	}
	tw := newTreeWriter(io.MultiWriter(zw, tarHash), epoch)
	if err := fill(tw); err != nil {
		return nil, err
	}
	if err := tw.close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return &builtLayer{path: f.Name(), digest: sum(blobHash), diff: sum(tarHash), size: counted.n}, f.Close()
}

func sum(h hash.Hash) v1.Hash {
	return v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// file writes src as name: a regular file owned by root with mode, at the
// epoch (the agent: its build's owner and umask are not the image's).
func (t *treeWriter) file(src, name string, mode int64) error {
	fi, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file", src)
	}
	h := &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: fi.Size(), ModTime: t.epoch}
	if err := t.tw.WriteHeader(h); err != nil {
		return err
	}
	return copyFile(t.tw, src, fi.Size())
}

// replaceLayout moves staged to out, unless out already holds the same
// image (its index.json is byte for byte the staged one): then out is
// left alone, and a sim reading it is not disturbed.
func replaceLayout(staged, out string) error {
	want, err := os.ReadFile(filepath.Join(staged, "index.json"))
	if err != nil {
		return err
	}
	if have, err := os.ReadFile(filepath.Join(out, "index.json")); err == nil && bytes.Equal(have, want) {
		if _, err := ocilayout.Open(out); err == nil {
			return nil
		}
	}
	old := out + ".old"
	if err := os.RemoveAll(old); err != nil {
		return err
	}
	if err := os.Rename(out, old); err != nil && !os.IsNotExist(err) {
		return err
	}
	if err := os.Rename(staged, out); err != nil {
		return err
	}
	return os.RemoveAll(old)
}
