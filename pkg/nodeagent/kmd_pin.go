package nodeagent

import (
	"context"
	"fmt"
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
func (x *execution) resolveCommit(ctx context.Context, src, version, gitURL, pin string) (string, error) {
	r := x.run(ctx, []string{"git", "-C", src, "rev-parse", "HEAD"})
	if r.err != nil {
		return "", toolFailure(ReasonCloneFailed, r, "git rev-parse HEAD of ttkmd-"+version)
	}
	commit := strings.TrimSpace(r.stdout)
	if !commitRE.MatchString(commit) {
		return "", failOutput(ReasonCloneFailed, r, "git rev-parse HEAD printed %q, not a commit ID", keepHead(commit, 80))
	}
	if pin != "" && commit != pin {
		return "", fail(ReasonCommitMismatch, "tag ttkmd-%s of %s resolves to commit %s, not the pinned %s: the tag moved "+
			"or the repository is not the one you pinned; nothing was built", version, RedactURL(gitURL), commit, pin)
	}
	return commit, nil
}
