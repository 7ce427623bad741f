package fakehost

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
)

// The host's logs (the changes the fake tools made, the unsafe things they
// were asked to do, every call) are JSON lines: appended by the tools, read
// back by tests.

// appendLine appends v to path as one JSON line.
func appendLine(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.Write(append(b, '\n'))
	return err
}

// readLines decodes the JSON lines of path after the first skip, oldest
// first; a log never written holds none.
func readLines[T any](path string, skip int) ([]T, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	for i := 0; sc.Scan(); i++ {
		if i < skip {
			continue
		}
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return out, err
		}
		out = append(out, v)
	}
	return out, sc.Err()
}
