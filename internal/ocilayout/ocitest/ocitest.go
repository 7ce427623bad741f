// Package ocitest writes OCI image layouts by hand for tests: any tar
// entries, including ones no builder would write.
package ocitest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/rollbook/rollbook/internal/ocilayout"
)

// Layer is one layer's entries and the contents of its regular files.
type Layer struct {
	Entries  []tar.Header
	Contents map[string]string
}

// Write writes a layout of one linux/amd64 image named refName with the
// layers (bottom first) and the config's Env to dir, and returns the
// manifest's digest.
func Write(t testing.TB, dir, refName string, env []string, layers ...Layer) string {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755))
	digest := func(b []byte) string { s := sha256.Sum256(b); return "sha256:" + hex.EncodeToString(s[:]) }
	blob := func(b []byte) string {
		d := digest(b)
		must(os.WriteFile(filepath.Join(dir, "blobs", "sha256", d[len("sha256:"):]), b, 0o644))
		return d
	}
	var diffIDs []string
	var descs []any
	for _, l := range layers {
		var raw bytes.Buffer
		tw := tar.NewWriter(&raw)
		for _, h := range l.Entries {
			h.Size = int64(len(l.Contents[h.Name]))
			must(tw.WriteHeader(&h))
			_, err := tw.Write([]byte(l.Contents[h.Name]))
			must(err)
		}
		must(tw.Close())
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, err := zw.Write(raw.Bytes())
		must(err)
		must(zw.Close())
		diffIDs = append(diffIDs, digest(raw.Bytes()))
		descs = append(descs, map[string]any{"mediaType": ocilayout.MediaTypeLayerGzip, "digest": blob(gz.Bytes()), "size": gz.Len()})
	}
	cfg, err := json.Marshal(map[string]any{"architecture": "amd64", "os": "linux", "config": map[string]any{"Env": env},
		"rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs}})
	must(err)
	man, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": ocilayout.MediaTypeManifest,
		"config": map[string]any{"mediaType": ocilayout.MediaTypeConfig, "digest": blob(cfg), "size": len(cfg)}, "layers": descs})
	must(err)
	manD := blob(man)
	idx, err := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{"mediaType": ocilayout.MediaTypeManifest,
		"digest": manD, "size": len(man), "annotations": map[string]string{ocilayout.AnnotationRefName: refName}}}})
	must(err)
	must(os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644))
	must(os.WriteFile(filepath.Join(dir, "oci-layout"), []byte(`{"imageLayoutVersion":"1.0.0"}`), 0o644))
	return manD
}
