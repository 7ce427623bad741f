package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
)

var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// ValidateCommit accepts a full git commit ID (40 hex digits); an
// abbreviated one could match more than one commit. Empty: no pin.
func ValidateCommit(c string) error {
	if c == "" || commitRE.MatchString(c) {
		return nil
	}
	return fmt.Errorf("%q is not a full commit ID (40 lower-case hex digits, as git rev-parse prints)", c)
}

// resolveCommit is the commit the cloned tag checked out (a tag is
// mutable: the commit is what was built), checked against the pin.
func (x *execution) resolveCommit(ctx context.Context, src string, o KMDOptions) (string, error) {
	r := x.run(ctx, []string{"git", "-C", src, "rev-parse", "HEAD"})
	if r.err != nil {
		return "", toolFailure(ReasonCloneFailed, r, "git rev-parse HEAD of ttkmd-"+o.Version)
	}
	commit := strings.TrimSpace(r.stdout)
	if !commitRE.MatchString(commit) {
		return "", failOutput(ReasonCloneFailed, r, "git rev-parse HEAD printed %q, not a commit ID", keepHead(commit, 80))
	}
	x.res.Commit = commit
	if o.Commit != "" && commit != o.Commit {
		return "", fail(ReasonCommitMismatch, "tag ttkmd-%s of %s resolves to commit %s, not the pinned %s: the tag moved "+
			"or the repository is not the one you pinned; nothing was built", o.Version, RedactURL(o.GitURL), commit, o.Commit)
	}
	return commit, nil
}

// cacheRecord sits next to a cached module: the SHA-256 it had when built,
// the commit it was built from and, since modules are shared between nodes,
// the rest of its ModuleInfo. A module without one, or whose bytes no
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
