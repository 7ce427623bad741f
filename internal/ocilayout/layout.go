// Package ocilayout reads an OCI image layout holding one image (what
// internal/nodeimage writes) and unpacks its layers, verifying every blob
// against its digest. Standard library only: the sim links it.
package ocilayout

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// Media types and annotations of the OCI image spec this package reads.
const (
	MediaTypeIndex     = "application/vnd.oci.image.index.v1+json"
	MediaTypeManifest  = "application/vnd.oci.image.manifest.v1+json"
	MediaTypeConfig    = "application/vnd.oci.image.config.v1+json"
	MediaTypeLayerGzip = "application/vnd.oci.image.layer.v1.tar+gzip"
	// AnnotationRefName names the image in a layout's index: the
	// repository and tag it is published as.
	AnnotationRefName = "org.opencontainers.image.ref.name"
)

// Descriptor points at a blob.
type Descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Config is the part of an image config a runtime acts on.
type Config struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Config       struct {
		Env    []string          `json:"Env"`
		Cmd    []string          `json:"Cmd"`
		Labels map[string]string `json:"Labels"`
	} `json:"config"`
	RootFS struct {
		Type    string   `json:"type"`
		DiffIDs []string `json:"diff_ids"`
	} `json:"rootfs"`
}

// Layer is one layer: its blob and the digest of its uncompressed tar.
type Layer struct {
	Descriptor
	DiffID string
}

// Image is the one image of a layout.
type Image struct {
	Dir string
	// Digest is the manifest's digest (sha256:…): what a pod names the
	// image by.
	Digest string
	// RefName is the index's ref.name annotation (repository:tag).
	RefName string
	Config  Config
	Layers  []Layer // bottom first
}

var digestRe = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// Open reads the layout at dir: its index must hold one image manifest,
// and the manifest and config must match their digests.
func Open(dir string) (*Image, error) {
	var lay struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := readJSON(filepath.Join(dir, "oci-layout"), &lay); err != nil || lay.Version != "1.0.0" {
		return nil, fmt.Errorf("%s is not an OCI image layout (oci-layout: %v; `make image` writes one)", dir, err)
	}
	var index struct {
		Manifests []Descriptor `json:"manifests"`
	}
	if err := readJSON(filepath.Join(dir, "index.json"), &index); err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	if len(index.Manifests) != 1 || index.Manifests[0].MediaType != MediaTypeManifest {
		return nil, fmt.Errorf("%s: the index must hold exactly one image manifest (%d entries)", dir, len(index.Manifests))
	}
	md := index.Manifests[0]
	im := &Image{Dir: dir, Digest: md.Digest, RefName: md.Annotations[AnnotationRefName]}
	var manifest struct {
		MediaType string       `json:"mediaType"`
		Config    Descriptor   `json:"config"`
		Layers    []Descriptor `json:"layers"`
	}
	if err := im.readBlob(md, &manifest); err != nil {
		return nil, err
	}
	if manifest.Config.MediaType != MediaTypeConfig {
		return nil, fmt.Errorf("%s: config media type %q", dir, manifest.Config.MediaType)
	}
	if err := im.readBlob(manifest.Config, &im.Config); err != nil {
		return nil, err
	}
	if len(im.Config.RootFS.DiffIDs) != len(manifest.Layers) {
		return nil, fmt.Errorf("%s: %d layers, %d diff IDs", dir, len(manifest.Layers), len(im.Config.RootFS.DiffIDs))
	}
	for i, l := range manifest.Layers {
		if l.MediaType != MediaTypeLayerGzip || !digestRe.MatchString(l.Digest) || !digestRe.MatchString(im.Config.RootFS.DiffIDs[i]) {
			return nil, fmt.Errorf("%s: layer %d: %s %s (gzip tar layers by sha256 only)", dir, i, l.MediaType, l.Digest)
		}
		fi, err := os.Stat(im.BlobPath(l.Digest))
		if err != nil || fi.Size() != l.Size {
			return nil, fmt.Errorf("%s: layer %s missing or of the wrong size: %v", dir, l.Digest, err)
		}
		im.Layers = append(im.Layers, Layer{Descriptor: l, DiffID: im.Config.RootFS.DiffIDs[i]})
	}
	return im, nil
}

// BlobPath is where the layout keeps the blob of digest d.
func (im *Image) BlobPath(d string) string {
	return filepath.Join(im.Dir, "blobs", "sha256", strings.TrimPrefix(d, "sha256:"))
}

// readBlob decodes the JSON blob of d after checking its size and digest.
func (im *Image) readBlob(d Descriptor, v any) error {
	if !digestRe.MatchString(d.Digest) {
		return fmt.Errorf("%s: digest %q is not sha256:<64 hex>", im.Dir, d.Digest)
	}
	b, err := os.ReadFile(im.BlobPath(d.Digest))
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != d.Digest || int64(len(b)) != d.Size {
		return fmt.Errorf("%s: blob %s does not match its digest (%s, %d bytes)", im.Dir, d.Digest, got, len(b))
	}
	return json.Unmarshal(b, v)
}

func readJSON(file string, v any) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// Repository is RefName without its tag ("" when there is no RefName).
func (im *Image) Repository() string {
	repo, _ := SplitTag(im.RefName)
	return repo
}

// Ref is the image by digest: Repository@Digest.
func (im *Image) Ref() string { return im.Repository() + "@" + im.Digest }

// SplitTag splits repository:tag at the tag's colon (a registry's port
// colon comes before a slash).
func SplitTag(ref string) (repo, tag string) {
	i := strings.LastIndex(ref, ":")
	if i < 0 || strings.Contains(ref[i:], "/") {
		return ref, ""
	}
	return ref[:i], ref[i+1:]
}

// Env returns the value of the config's environment variable name.
func (im *Image) Env(name string) string {
	for _, e := range im.Config.Config.Env {
		if k, v, ok := strings.Cut(e, "="); ok && k == name {
			return v
		}
	}
	return ""
}
