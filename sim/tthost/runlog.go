package tthost

import (
	"fmt"
	"os"
	"sync"
	"time"
)

// RunLog is an append-only text log that keeps its size bounded: once the
// file passes Max bytes it becomes <path>.1 (replacing the older one).
type RunLog struct {
	Path string
	Max  int64 // default 1 MiB

	mu sync.Mutex
}

// Printf appends one timestamped line.
func (l *RunLog) Printf(format string, a ...any) {
	if l == nil || l.Path == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	limit := l.Max
	if limit <= 0 {
		limit = 1 << 20
	}
	if fi, err := os.Stat(l.Path); err == nil && fi.Size() >= limit {
		_ = os.Rename(l.Path, l.Path+".1")
	}
	f, err := os.OpenFile(l.Path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	defer f.Close()
	fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, a...))
}
