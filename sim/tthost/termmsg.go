package tthost

import (
	"errors"
	"io"
	"os"
	"strings"
)

// The kubelet's limits (pkg/kubelet/container/runtime.go): a container's
// message is the LAST 4 KiB of its termination-message file; the pod's
// messages share 12 KiB, split evenly over all its containers, and each is
// then cut to its share from the front. With FallbackToLogsOnError a failed
// container with no message gets the tail of its log (80 lines, 2 KiB).
const (
	maxContainerMessage = 4 * 1024
	maxPodMessages      = 12 * 1024
	maxLogLines         = 80
	maxLogBytes         = 2 * 1024
)

// readTail returns at most n bytes from the end of the file at path; a
// missing file reads as empty.
func readTail(path string, n int64) (string, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if off := fi.Size() - n; off > 0 {
		if _, err := f.Seek(off, io.SeekStart); err != nil {
			return "", err
		}
	}
	b, err := io.ReadAll(io.LimitReader(f, n))
	return string(b), err
}

// terminationMessage is what the kubelet would put into
// state.terminated.message for one container.
func terminationMessage(termLog, outLog string, fallbackToLogs, failed bool) string {
	msg, err := readTail(termLog, maxContainerMessage)
	if err != nil {
		return "Error on reading termination log " + termLog + ": " + err.Error()
	}
	if msg == "" && fallbackToLogs && failed {
		out, _ := readTail(outLog, maxLogBytes)
		msg = lastLines(out, maxLogLines)
	}
	return msg
}

// podMessageBudget is each container's share of the pod's 12 KiB.
func podMessageBudget(containers int) int {
	if containers <= 0 {
		return maxPodMessages
	}
	return maxPodMessages / containers
}

func cutMessage(msg string, budget int) string {
	if len(msg) > budget {
		return msg[:budget]
	}
	return msg
}

func lastLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "")
}
