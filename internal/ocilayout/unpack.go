package ocilayout

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Unpack extracts layer l of im into dest, a directory that must not
// exist, as a container runtime's snapshotter does: owners, modes, times,
// extended attributes, hard links and symlinks as the tar says. It writes
// into a temporary sibling and renames it to dest only once the blob and
// the tar matched their digests to the last byte; a layer that fails
// leaves nothing behind.
func (im *Image) Unpack(l Layer, dest string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".tmp-")
	if err != nil {
		return err
	}
	if err := im.extract(l, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return fmt.Errorf("layer %s: %w", l.Digest, err)
	}
	// The layer's root is the image's /, which no entry describes.
	if err := os.Chmod(tmp, 0o755); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(tmp, dest); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	return nil
}

func (im *Image) extract(l Layer, root string) error {
	f, err := os.Open(im.BlobPath(l.Digest))
	if err != nil {
		return err
	}
	defer f.Close()
	blobHash, tarHash := sha256.New(), sha256.New()
	zr, err := gzip.NewReader(io.TeeReader(f, blobHash))
	if err != nil {
		return err
	}
	tr := tar.NewReader(io.TeeReader(zr, tarHash))
	var dirs []*tar.Header
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if err := entry(root, h, tr); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		if h.Typeflag == tar.TypeDir {
			dirs = append(dirs, h)
		}
	}
	// The rest of the gzip stream and the blob, so both digests cover all.
	if _, err := io.Copy(io.Discard, zr); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, f); err != nil {
		return err
	}
	if got := digestOf(blobHash); got != l.Digest {
		return fmt.Errorf("the blob's digest is %s", got)
	}
	if got := digestOf(tarHash); got != l.DiffID {
		return fmt.Errorf("the tar's digest is %s, the config says %s", got, l.DiffID)
	}
	// Directory times last: writing into a directory moves its mtime.
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := setTime(filepath.Join(root, dirs[i].Name), dirs[i].ModTime, false); err != nil {
			return err
		}
	}
	return nil
}

func digestOf(h hash.Hash) string { return "sha256:" + hex.EncodeToString(h.Sum(nil)) }

// entry creates one tar entry under root.
func entry(root string, h *tar.Header, r io.Reader) error {
	name := path.Clean(h.Name)
	if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") || name == "." {
		return errors.New("a name outside the layer")
	}
	if strings.HasPrefix(path.Base(name), ".wh.") {
		return errors.New("whiteouts are not supported (images built by internal/nodeimage have none)")
	}
	if err := parentsAreDirs(root, name); err != nil {
		return err
	}
	p := filepath.Join(root, filepath.FromSlash(name))
	mode := os.FileMode(h.Mode & 0o777)
	if h.Mode&0o4000 != 0 {
		mode |= os.ModeSetuid
	}
	if h.Mode&0o2000 != 0 {
		mode |= os.ModeSetgid
	}
	if h.Mode&0o1000 != 0 {
		mode |= os.ModeSticky
	}
	switch h.Typeflag {
	case tar.TypeDir:
		if err := os.Mkdir(p, 0o700); err != nil && !os.IsExist(err) {
			return err
		}
	case tar.TypeReg:
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			f.Close()
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	case tar.TypeSymlink:
		if err := os.Symlink(h.Linkname, p); err != nil {
			return err
		}
	case tar.TypeLink:
		target := path.Clean(h.Linkname)
		if path.IsAbs(target) || strings.HasPrefix(target, "../") || target == ".." {
			return errors.New("a hard link outside the layer")
		}
		// The target must be an entry of this layer already unpacked.
		return os.Link(filepath.Join(root, filepath.FromSlash(target)), p)
	default:
		return fmt.Errorf("entry type %q is not supported", h.Typeflag)
	}
	if err := os.Lchown(p, h.Uid, h.Gid); err != nil {
		return err
	}
	for k, v := range h.PAXRecords {
		if x, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			if err := unix.Lsetxattr(p, x, []byte(v), 0); err != nil {
				return fmt.Errorf("xattr %s: %w", x, err)
			}
		}
	}
	if h.Typeflag != tar.TypeSymlink {
		// After chown, which clears setuid and setgid bits.
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
	}
	return setTime(p, h.ModTime, h.Typeflag == tar.TypeSymlink)
}

// parentsAreDirs refuses a name whose parent, inside root, is anything but
// a real directory (a symlink there would write outside the layer).
func parentsAreDirs(root, name string) error {
	cur := root
	for _, c := range strings.Split(path.Dir(name), "/") {
		if c == "." {
			continue
		}
		cur = filepath.Join(cur, c)
		fi, err := os.Lstat(cur)
		if err != nil {
			return fmt.Errorf("parent %s: %w", c, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("parent %s is not a directory", c)
		}
	}
	return nil
}

func setTime(p string, t time.Time, symlink bool) error {
	ts := []unix.Timespec{unix.NsecToTimespec(t.UnixNano()), unix.NsecToTimespec(t.UnixNano())}
	flags := 0
	if symlink {
		flags = unix.AT_SYMLINK_NOFOLLOW
	}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, flags)
}
