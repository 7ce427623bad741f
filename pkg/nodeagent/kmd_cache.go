package nodeagent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/rollbook/rollbook/pkg/kmodule"
)

// The module cache: /var/cache/tt-kmd/<kver>/<version>/<first 16 hex of
// the module's SHA-256>/tenstorrent.ko, its record (ModuleInfo) beside it
// as tenstorrent.ko.json. It is content-addressed: the kmd helper looks a
// module up by the SHA-256 kubectl tt vouched for and loads it only when
// its bytes hash to exactly that, so neither the path nor the record decide
// what is loaded. The record says where the bytes came from (git URL,
// commit, builder, signer). Entries of an older rollbook
// (<kver>/<version>/tenstorrent.ko, signed-<cert>/tenstorrent.ko) are still
// found by version: the previous module a failed load puts back, the
// loaded module a re-run persists.

// cachedModule is the cache's file for the module of (kernel, version)
// with SHA-256 sha.
func (a *Agent) cachedModule(kver, version, sha string) string {
	return a.hostPath(filepath.Join(kmdCacheDir, kver, version, sha[:16], kmdModuleFile))
}

// cacheEntries are the version's cached modules for kver that pass
// verifyCached, newest first.
func (a *Agent) cacheEntries(kver, version string) []cachedEntry {
	dir := a.hostPath(filepath.Join(kmdCacheDir, kver, version))
	paths := []string{filepath.Join(dir, kmdModuleFile)}
	more, _ := filepath.Glob(filepath.Join(dir, "*", kmdModuleFile))
	paths = append(paths, more...)
	var out []cachedEntry
	for _, p := range paths {
		rec, err := verifyCached(p, "")
		if err != nil {
			continue
		}
		fi, _ := os.Stat(p)
		out = append(out, cachedEntry{path: p, rec: rec, mod: fi.ModTime().UnixNano()})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].mod > out[j].mod })
	return out
}

type cachedEntry struct {
	path string
	rec  cacheRecord
	mod  int64
}

// builtHere is a cached module of (kver, version) this node built, unsigned,
// from gitURL at commit: the module it persists for an installed kernel it
// does not run (a node is trusted with itself).
func (a *Agent) builtHere(kver, version, gitURL, commit string) (cachedEntry, bool) {
	for _, e := range a.cacheEntries(kver, version) {
		if e.rec.Commit == commit && e.rec.GitURL == gitURL && e.rec.Signer == "" {
			return e, true
		}
	}
	return cachedEntry{}, false
}

// cacheRecord sits next to a cached module: the SHA-256 it had when
// stored, and where it came from. A module without one, or whose bytes no
// longer match it, is not used.
type cacheRecord = ModuleInfo

func cacheRecordPath(ko string) string { return ko + ".json" }

// recordCached writes ko's record: info with ko's own SHA-256 and size.
func recordCached(ko string, info ModuleInfo) error {
	sum, err := fileHexSHA256(ko)
	if err != nil {
		return err
	}
	fi, err := os.Stat(ko)
	if err != nil {
		return err
	}
	info.SHA256, info.Size = sum, fi.Size()
	b, _ := json.Marshal(info)
	return replaceFile(cacheRecordPath(ko), strings.NewReader(string(b)+"\n"), 0o644)
}

// storeCached writes raw into the cache as the module of (kver, version)
// with its record, and returns its path.
func (a *Agent) storeCached(raw []byte, kver, version string, info ModuleInfo) (string, error) {
	ko := a.cachedModule(kver, version, hexSHA256(raw))
	if err := replaceFile(ko, strings.NewReader(string(raw)), 0o644); err != nil {
		return "", err
	}
	return ko, recordCached(ko, info)
}

// verifyCached returns ko's record when ko may be loaded: it exists, its
// SHA-256 is the recorded one, and it was built from pin (when set). The
// error says why not; os.ErrNotExist when nothing is cached.
func verifyCached(ko, pin string) (cacheRecord, error) {
	var rec cacheRecord
	fi, err := os.Stat(ko)
	if err != nil || !fi.Mode().IsRegular() {
		return rec, os.ErrNotExist
	}
	b, err := os.ReadFile(cacheRecordPath(ko))
	if err != nil {
		return rec, fmt.Errorf("%s has no checksum record (%s)", ko, cacheRecordPath(ko))
	}
	if json.Unmarshal(b, &rec) != nil || !sha256RE.MatchString(rec.SHA256) {
		return rec, fmt.Errorf("%s: unreadable checksum record", cacheRecordPath(ko))
	}
	sum, err := fileHexSHA256(ko)
	if err != nil {
		return rec, err
	}
	if sum != rec.SHA256 {
		return rec, fmt.Errorf("%s: %w", ko, &digestMismatch{got: sum, want: rec.SHA256})
	}
	if pin != "" && rec.Commit != pin {
		return rec, fmt.Errorf("%s was built from commit %q, not the pinned %s", ko, rec.Commit, pin)
	}
	return rec, nil
}

// cachedCommitOf is the commit of the cached build of (kver, version)
// whose srcversion is src: which build of the version is loaded. "" when
// src is unknown or no cached build has it.
func (a *Agent) cachedCommitOf(kver, version, src string) string {
	if src == "" {
		return ""
	}
	for _, e := range a.cacheEntries(kver, version) {
		raw, err := os.ReadFile(e.path)
		if err != nil {
			continue
		}
		if mi, err := kmodule.ReadInfo(raw); err == nil && mi.SrcVersion == src {
			return e.rec.Commit
		}
	}
	return ""
}
