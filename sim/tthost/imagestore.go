package tthost

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rollbook/rollbook/internal/ocilayout"
)

// Image is the node-agent image the runner runs helpers from: an OCI
// image (`make image`'s layout) unpacked layer by layer, as a container
// runtime's snapshotter keeps it, and what a pod may name it by.
type Image struct {
	// Digest is the manifest's digest; Repo and Tag come from the layout's
	// ref.name (ghcr.io/rollbook/node-agent:<version>).
	Digest, Repo, Tag string
	// Mirrors are other repositories the nodes pull the image through (a
	// registry mirror): REPO@<Digest> resolves there too, by digest only.
	Mirrors []string
	// Layers are the unpacked layer directories, bottom first.
	Layers []string
	// PATH is the image config's.
	PATH string

	locks []*os.File
}

// Ref is the image by digest, as a release's plugin names it.
func (im *Image) Ref() string { return im.Repo + "@" + im.Digest }

// Resolves reports whether a pod naming ref would get this image: the
// repository by this digest, or by the tag the layout names. Anything
// else is not in the sim's registry.
func (im *Image) Resolves(ref string) bool {
	if name, d, ok := strings.Cut(ref, "@"); ok {
		repo, _ := ocilayout.SplitTag(name) // repo:tag@digest pulls by digest
		return (repo == im.Repo || slices.Contains(im.Mirrors, repo)) && d == im.Digest
	}
	repo, tag := ocilayout.SplitTag(ref)
	return repo == im.Repo && tag != "" && tag == im.Tag
}

// Close releases the image's layers to the store's garbage collection.
func (im *Image) Close() {
	for _, f := range im.locks {
		f.Close()
	}
	im.locks = nil
}

// layerGrace is how long an unused unpacked layer stays in the store: a
// sim of the previous build may still be starting.
const layerGrace = time.Hour

// LoadImage opens the OCI layout at dir and unpacks each layer into store
// (one directory per layer digest, shared by every sim on this machine,
// verified against its digest while unpacked). Each layer stays locked
// (shared) until Close; layers no sim holds that were not used for an
// hour are removed.
func LoadImage(dir, store string) (*Image, error) {
	li, err := ocilayout.Open(dir)
	if err != nil {
		return nil, err
	}
	if li.Config.OS != imagePlatformOS || li.Config.Architecture != imagePlatformArch {
		return nil, fmt.Errorf("%s is a %s/%s image; the sim runs %s/%s", dir, li.Config.OS, li.Config.Architecture,
			imagePlatformOS, imagePlatformArch)
	}
	repo, tag := ocilayout.SplitTag(li.RefName)
	if repo == "" || tag == "" {
		return nil, fmt.Errorf("%s names no repository:tag (index annotation %s)", dir, ocilayout.AnnotationRefName)
	}
	if err := os.MkdirAll(store, 0o755); err != nil {
		return nil, err
	}
	im := &Image{Digest: li.Digest, Repo: repo, Tag: tag, PATH: li.Env("PATH")}
	keep := map[string]bool{}
	for _, l := range li.Layers {
		hex := strings.TrimPrefix(l.Digest, "sha256:")
		keep[hex] = true
		lock, err := lockShared(filepath.Join(store, hex+".lock"))
		if err != nil {
			im.Close()
			return nil, err
		}
		im.locks = append(im.locks, lock)
		d := filepath.Join(store, hex)
		if _, err := os.Stat(d); os.IsNotExist(err) {
			if err := li.Unpack(l, d); err != nil {
				if _, serr := os.Stat(d); serr != nil { // not another sim's unpack winning the rename
					im.Close()
					return nil, err
				}
			}
		}
		im.Layers = append(im.Layers, d)
	}
	collect(store, keep)
	return im, nil
}

// lockShared opens and share-locks file, making sure the lock is on the
// file now at that path (a collector may have removed it meanwhile), and
// marks it used now.
func lockShared(file string) (*os.File, error) {
	for {
		f, err := os.OpenFile(file, os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			return nil, err
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
			f.Close()
			return nil, err
		}
		held, err1 := f.Stat()
		now, err2 := os.Stat(file)
		if err1 == nil && err2 == nil && os.SameFile(held, now) {
			t := time.Now()
			_ = os.Chtimes(file, t, t)
			return f, nil
		}
		f.Close()
	}
}

// collect removes the layers no sim holds, not in keep, unused for
// layerGrace, and unpacks abandoned for as long.
func collect(store string, keep map[string]bool) {
	entries, err := os.ReadDir(store)
	if err != nil {
		return
	}
	old := time.Now().Add(-layerGrace)
	for _, e := range entries {
		name := e.Name()
		info, err := e.Info()
		if err != nil || info.ModTime().After(old) {
			continue
		}
		if strings.HasPrefix(name, ".") && strings.Contains(name, ".tmp-") {
			_ = os.RemoveAll(filepath.Join(store, name))
			continue
		}
		hex, ok := strings.CutSuffix(name, ".lock")
		if !ok || keep[hex] {
			continue
		}
		f, err := os.OpenFile(filepath.Join(store, name), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			_ = os.RemoveAll(filepath.Join(store, hex))
			_ = os.Remove(filepath.Join(store, name))
		}
		f.Close()
	}
}

// lookup returns the topmost layer's entry at p (a path inside the image):
// an overlay shows that one (the images have no whiteouts).
func (im *Image) lookup(p string) (string, os.FileInfo, error) {
	var last error
	for i := len(im.Layers) - 1; i >= 0; i-- {
		outside := filepath.Join(im.Layers[i], p)
		fi, err := os.Lstat(outside)
		if err == nil {
			return outside, fi, nil
		}
		last = err
	}
	return "", nil, last
}
