package nodeagent

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// OpCleanCache removes what the agent keeps on the host between runs and
// no running module needs: the module cache and a tt-smi left staged.
const OpCleanCache Op = "clean-cache"

// HostCaches are the host paths clean-cache removes (relative to the root).
// The installed module (/lib/modules/<kver>/updates) and the host's tt-smi
// stay: the node runs them.
var HostCaches = []string{kmdCacheDir, stagedSMIPath}

// CleanCache removes HostCaches. It refuses nothing: the CLI runs it only
// on nodes no runbook is half-way through. Its step says what went.
func (a *Agent) CleanCache(ctx context.Context) Result {
	x := a.begin(OpCleanCache, "")
	var gone []string
	err := x.step("remove host caches", func() (string, error) {
		for _, rel := range HostCaches {
			p := a.hostPath(rel)
			n, size := 0, int64(0)
			_ = filepath.WalkDir(p, func(_ string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					n++
					if fi, err := d.Info(); err == nil {
						size += fi.Size()
					}
				}
				return nil
			})
			if _, err := os.Lstat(p); os.IsNotExist(err) {
				continue
			}
			if err := os.RemoveAll(p); err != nil {
				return "", fail(ReasonHostError, "remove /%s: %v", rel, err)
			}
			gone = append(gone, fmt.Sprintf("/%s (%d files, %d bytes)", rel, n, size))
		}
		if len(gone) == 0 {
			return "nothing cached", nil
		}
		x.res.Changed = true
		return "removed " + strings.Join(gone, ", "), nil
	})
	return x.finish(ctx, err)
}
