package nodeimage

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The root filesystem's layer is ~300 MB of tar to compress (~10 s): a
// build reuses the one the last build at the same output wrote when
// nothing under the root changed since. "Changed" is judged by every
// entry's inode, size, mtime and ctime (which no write or chmod can keep)
// and by this builder's own binary, so a change to how layers are written
// is never served a layer the old code wrote.

type baseCache struct {
	Key    string `json:"key"`
	Digest string `json:"digest"`
	DiffID string `json:"diffID"`
	Size   int64  `json:"size"`
}

func baseCacheFile(out string) string { return out + ".base.json" }

// baseLayer returns the root filesystem's layer and the key it is cached by.
func baseLayer(tmp, rootfs, out string, epoch time.Time) (*builtLayer, string, error) {
	key, err := treeKey(rootfs, epoch)
	if err != nil {
		return nil, "", err
	}
	var c baseCache
	if b, err := os.ReadFile(baseCacheFile(out)); err == nil && json.Unmarshal(b, &c) == nil && c.Key == key {
		d, err1 := v1.NewHash(c.Digest)
		diff, err2 := v1.NewHash(c.DiffID)
		blob := filepath.Join(out, "blobs", "sha256", d.Hex)
		if fi, err := os.Stat(blob); err1 == nil && err2 == nil && err == nil && fi.Size() == c.Size {
			return &builtLayer{path: blob, digest: d, diff: diff, size: c.Size}, key, nil
		}
	}
	l, err := writeLayer(tmp, epoch, func(t *treeWriter) error { return t.writeTree(rootfs) })
	return l, key, err
}

func saveBaseKey(out, key string, l *builtLayer) error {
	b, err := json.Marshal(baseCache{Key: key, Digest: l.digest.String(), DiffID: l.diff.String(), Size: l.size})
	if err != nil {
		return err
	}
	return os.WriteFile(baseCacheFile(out), b, 0o644)
}

// treeKey hashes what identifies the tree's current state, and the builder.
func treeKey(root string, epoch time.Time) (string, error) {
	h := sha256.New()
	self, err := os.Executable()
	if err != nil {
		return "", err
	}
	f, err := os.Open(self)
	if err != nil {
		return "", err
	}
	_, err = io.Copy(h, f)
	f.Close()
	if err != nil {
		return "", err
	}
	fmt.Fprintf(h, "epoch %d\n", epoch.Unix())
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("%s: no stat_t", p)
		}
		fmt.Fprintf(h, "%q %o %d %d %d %d %d.%d %d.%d %d %d %d\n", p, fi.Mode(), st.Uid, st.Gid, st.Size, st.Ino,
			st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec, st.Nlink, st.Dev, st.Rdev)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}
