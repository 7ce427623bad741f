// Package clitest holds what the plugins' command tests share: input
// that says it is a terminal, and a kubeconfig no command can reach.
package clitest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Terminal is input a person types at a terminal.
type Terminal struct{ *strings.Reader }

// IsTerminal says the input is a terminal, as the confirmation asks.
func (Terminal) IsTerminal() bool { return true }

// UnreachableKubeconfig writes a kubeconfig whose server refuses every
// connection: a command past its confirmation fails reaching it, one
// that stopped there never tries.
func UnreachableKubeconfig(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	const cfg = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
