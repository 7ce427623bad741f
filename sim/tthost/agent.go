package tthost

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// AgentName is the argv[0] of the only helper command the runner executes.
const AgentName = "kubectl-tt"

// ResolveAgent finds the kubectl-tt binary that helper pods run: explicit
// when given, else kubectl-tt next to simExe, else kubectl-tt on PATH.
func ResolveAgent(explicit, simExe string) (string, error) {
	if explicit != "" {
		abs, err := filepath.Abs(explicit)
		if err != nil {
			return "", err
		}
		if err := checkExecutable(abs); err != nil {
			return "", fmt.Errorf("--tt-agent %s: %w", explicit, err)
		}
		return abs, nil
	}
	if simExe != "" {
		beside := filepath.Join(filepath.Dir(simExe), AgentName)
		if checkExecutable(beside) == nil {
			return beside, nil
		}
	}
	if p, err := exec.LookPath(AgentName); err == nil {
		return filepath.Abs(p)
	}
	return "", fmt.Errorf("no %s binary for the helper runner: pass --tt-agent PATH, or put %s next to the sim binary or on PATH "+
		"(build it with `go build -o .cache/bin/ ./cmd/kubectl-tt`)", AgentName, AgentName)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return errors.New("not an executable file")
	}
	return nil
}
