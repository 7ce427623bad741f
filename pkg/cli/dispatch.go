package cli

import (
	"path/filepath"
	"strings"
)

// ArgsForInvocation lets one binary serve a nested plugin layout. kubectl
// runs the longest matching plugin binary, so `kubectl ate roll next-node`
// runs kubectl-ate-roll (args "next-node") when it exists, else kubectl-ate.
// When this binary is installed as kubectl-<plugin>-<sub>[-<subsub>…], the
// subcommand path encoded in its name is put back in front of args. kubectl
// turns dashes inside a command word into underscores in binary names, so
// they are turned back here.
func ArgsForInvocation(plugin, argv0 string, args []string) []string {
	base := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	prefix := "kubectl-" + plugin + "-"
	if !strings.HasPrefix(base, prefix) || len(base) == len(prefix) {
		return args
	}
	var path []string
	for _, w := range strings.Split(base[len(prefix):], "-") {
		path = append(path, strings.ReplaceAll(w, "_", "-"))
	}
	return append(path, args...)
}
