package nodeimage

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// RuntimeDirs are provided by the container runtime, never by an image:
// their entries are kept, their contents are not (debootstrap leaves
// device nodes in /dev).
var RuntimeDirs = []string{"dev", "proc", "sys"}

// clamp is the mtime an entry is written with: never after the epoch,
// whole seconds (what dpkg unpacked keeps its package's times, which
// Python's .pyc files are checked against; what was made at build time
// gets the epoch).
func clamp(t, epoch time.Time) time.Time {
	if t.After(epoch) {
		t = epoch
	}
	return t.Truncate(time.Second)
}

type devIno struct{ dev, ino uint64 }

// treeWriter writes file system entries as tar headers, deterministically.
type treeWriter struct {
	tw    *tar.Writer
	epoch time.Time
	links map[devIno]string // first name of each hard-linked inode
}

func newTreeWriter(w io.Writer, epoch time.Time) *treeWriter {
	return &treeWriter{tw: tar.NewWriter(w), epoch: epoch, links: map[devIno]string{}}
}

// writeTree writes every entry under root, root itself excluded, in
// lexical order (filepath.WalkDir's).
func (t *treeWriter) writeTree(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if err := t.entry(p, rel); err != nil {
			return err
		}
		if d.IsDir() && isRuntimeDir(rel) {
			return fs.SkipDir
		}
		return nil
	})
}

func isRuntimeDir(rel string) bool {
	for _, d := range RuntimeDirs {
		if rel == d {
			return true
		}
	}
	return false
}

// entry writes the file at src as name (slash-separated, relative).
func (t *treeWriter) entry(src, name string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no stat_t", src)
	}
	mode := fi.Mode()
	h := &tar.Header{
		Name:    name,
		Mode:    int64(mode.Perm()),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: clamp(fi.ModTime(), t.epoch),
	}
	if mode&fs.ModeSetuid != 0 {
		h.Mode |= 0o4000
	}
	if mode&fs.ModeSetgid != 0 {
		h.Mode |= 0o2000
	}
	if mode&fs.ModeSticky != 0 {
		h.Mode |= 0o1000
	}
	if x, err := xattrs(src); err != nil {
		return err
	} else if len(x) > 0 {
		h.PAXRecords = x
	}
	switch {
	case mode.IsDir():
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
	case mode&fs.ModeSymlink != 0:
		h.Typeflag = tar.TypeSymlink
		if h.Linkname, err = os.Readlink(src); err != nil {
			return err
		}
	case mode.IsRegular():
		key := devIno{uint64(st.Dev), st.Ino} //nolint:unconvert // Dev is uint64 on amd64 only
		if first, seen := t.links[key]; seen && st.Nlink > 1 {
			h.Typeflag, h.Linkname = tar.TypeLink, first
			return t.tw.WriteHeader(h)
		}
		if st.Nlink > 1 {
			t.links[key] = name
		}
		h.Typeflag, h.Size = tar.TypeReg, fi.Size()
		if err := t.tw.WriteHeader(h); err != nil {
			return err
		}
		return copyFile(t.tw, src, fi.Size())
	default:
		return fmt.Errorf("%s: a %v has no place in an image (only %v hold special files, and the runtime provides them)",
			src, mode.Type(), RuntimeDirs)
	}
	return t.tw.WriteHeader(h)
}

func copyFile(w io.Writer, src string, size int64) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(w, io.LimitReader(f, size))
	if err == nil && n != size {
		err = fmt.Errorf("%s changed size while it was read", src)
	}
	return err
}

// xattrs are a file's extended attributes as PAX records (file
// capabilities travel so); SELinux labels belong to the host, not the image.
func xattrs(p string) (map[string]string, error) {
	buf := make([]byte, 1024)
	n, err := unix.Llistxattr(p, buf)
	if errors.Is(err, unix.ENOTSUP) || n == 0 {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: listxattr: %w", p, err)
	}
	out := map[string]string{}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if name == "" || strings.HasPrefix(name, "security.selinux") {
			continue
		}
		v := make([]byte, 4096)
		m, err := unix.Lgetxattr(p, name, v)
		if err != nil {
			return nil, fmt.Errorf("%s: getxattr %s: %w", p, name, err)
		}
		out["SCHILY.xattr."+name] = string(v[:m])
	}
	return out, nil
}

// parentDirs writes the directories above name (a path in the image)
// with the metadata they have in root, so the layer's directories are the
// lower layer's (an overlay shows the topmost layer's directory).
func (t *treeWriter) parentDirs(root, name string) error {
	var dirs []string
	for d := path.Dir(name); d != "." && d != "/"; d = path.Dir(d) {
		dirs = append([]string{d}, dirs...)
	}
	for _, d := range dirs {
		src := filepath.Join(root, filepath.FromSlash(d))
		if fi, err := os.Stat(src); err != nil || !fi.IsDir() {
			return fmt.Errorf("%s: the root filesystem has no directory %s to put %s in", root, d, name)
		}
		if err := t.entry(src, d); err != nil {
			return err
		}
	}
	return nil
}

func (t *treeWriter) close() error { return t.tw.Close() }
