package tt

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/rollbook/rollbook/pkg/nodeagent"
)

// AgentPath is where the node-agent image has kubectl-tt. Helpers run it
// by this absolute path: what runs does not depend on the image's $PATH.
const AgentPath = "/usr/local/bin/kubectl-tt"

// HelperTasks are the helper pods kubectl tt creates, by their task.
var HelperTasks = []string{"probe", kmdBuildTask, kmdTask, "smi", flashTask, string(nodeagent.OpCleanCache)}

// ArgvFlag is one flag a helper's command may carry.
type ArgvFlag struct {
	Name string // "--version"
	// Value is the RE2 its value matches, anchored by the grammar; empty
	// for a flag that takes no value.
	Value string
	// Param, when set, names the admission policy's parameter (a
	// comma-separated list in its ConfigMap) the value must be in: the
	// cluster admin's choice, not the operator's.
	Param string
	// Prefix says the value must start with one of Param's entries rather
	// than equal one.
	Prefix bool
	// Then is a flag that must follow this one.
	Then *ArgvFlag
}

// ArgvSlot is one place in a command: one of its flags, or none when
// Optional.
type ArgvSlot struct {
	OneOf    []ArgvFlag
	Optional bool
}

// ArgvGrammar is every command a helper of one task may run: the agent,
// "node-agent", the task, then its slots in this order. The admission
// policy admits exactly these commands (AgentCommand's regular
// expression), and the runbooks build theirs with Build, so the two cannot
// drift apart.
type ArgvGrammar struct {
	Task  string
	Slots []ArgvSlot
}

// Patterns of the values helpers take. Each excludes a leading dash (never
// read as a flag) and whitespace.
const (
	patKMDVersion = `[0-9]{1,6}\.[0-9]{1,6}(\.[0-9]{1,6})?(-[0-9A-Za-z][0-9A-Za-z.]{0,31})?`
	patVersion    = `[0-9]{1,6}\.[0-9]{1,6}\.[0-9]{1,6}`
	patReadback   = `[0-9]{1,6}\.[0-9]{1,6}\.[0-9]{1,6}(\.[0-9]{1,6})?`
	patDuration   = `([0-9]{1,9}(\.[0-9]{1,9})?(h|m|s|ms))+`
	patCommit     = `[0-9a-f]{40}`
	patSHA256     = `[0-9a-f]{64}`
	patURL        = `(https|file)://[^\s@]+`
)

// Policy parameters (keys of the ConfigMap rollbook-helper-policy) the
// argv refers to.
const (
	ParamKMDGitURLs    = "kmdGitURLs"
	ParamBundleURLs    = "bundleURLPrefixes"
	ParamBundleDigests = "bundleSHA256s"
)

func valueFlag(name, pattern string) ArgvFlag { return ArgvFlag{Name: name, Value: pattern} }
func boolFlag(name string) ArgvFlag           { return ArgvFlag{Name: name} }
func one(f ArgvFlag) ArgvSlot                 { return ArgvSlot{OneOf: []ArgvFlag{f}} }
func maybe(f ...ArgvFlag) ArgvSlot            { return ArgvSlot{OneOf: f, Optional: true} }

func bundleURLFlag(name string) ArgvFlag {
	return ArgvFlag{Name: name, Value: patURL, Param: ParamBundleURLs, Prefix: true}
}

func ptrFlag(f ArgvFlag) *ArgvFlag { return &f }

var gitURLFlag = ArgvFlag{Name: "--git-url", Value: patURL, Param: ParamKMDGitURLs}

// HelperGrammars are the commands of every helper task.
var HelperGrammars = map[string]ArgvGrammar{
	"probe": {Task: "probe", Slots: []ArgvSlot{
		maybe(valueFlag("--kmd-version", patKMDVersion)),
		maybe(gitURLFlag),
		// upgrade firmware's probe reads the bundle the flash would use
		// (not a presigned one: the probe carries no Secret).
		maybe(bundleURLFlag("--bundle-url")),
		maybe(valueFlag("--bundle-sha256", patSHA256)),
	}},
	// The module once per kernel group: loads nothing (kmdhelpers.go).
	kmdBuildTask: {Task: kmdBuildTask, Slots: []ArgvSlot{
		one(valueFlag("--version", patKMDVersion)),
		maybe(valueFlag("--commit", patCommit)),
		one(gitURLFlag),
		maybe(valueFlag("--timeout", patDuration)),
	}},
	// The install: the module kubectl tt vouched for, by its SHA-256 (and
	// its signer's), from the shared ConfigMap (kmdhelpers.go).
	kmdTask: {Task: kmdTask, Slots: []ArgvSlot{
		one(valueFlag("--version", patKMDVersion)),
		maybe(valueFlag("--timeout", patDuration)),
		maybe(valueFlag("--commit", patCommit)),
		one(gitURLFlag),
		maybe(boolFlag("--force-unload")),
		maybe(ArgvFlag{Name: "--module-sha256", Value: patSHA256,
			Then: ptrFlag(valueFlag("--module-from", regexp.QuoteMeta(SharedModuleMount)))}),
		maybe(valueFlag("--module-signer", patSHA256)),
	}},
	"smi": {Task: "smi", Slots: []ArgvSlot{
		one(valueFlag("--version", patVersion)),
	}},
	"flash": {Task: "flash", Slots: []ArgvSlot{
		one(valueFlag("--version", patVersion)),
		one(valueFlag("--readback-version", patReadback)),
		{OneOf: []ArgvFlag{
			bundleURLFlag("--bundle-url"),
			// A presigned URL comes from a Secret the policy cannot read
			// (its data is base64, which CEL cannot decode): the URL
			// without its query travels beside it, the policy checks that,
			// and the agent refuses a URL that is not it plus a query.
			{Name: "--bundle-url-env", Value: regexp.QuoteMeta(EnvBundleURL), Then: ptrFlag(bundleURLFlag("--bundle-url-base"))},
		}},
		one(valueFlag("--timeout", patDuration)),
		maybe(valueFlag("--bundle-sha256", patSHA256)),
		maybe(boolFlag("--force-write")),
		maybe(boolFlag("--allow-major-downgrade")),
		maybe(boolFlag("--continue-on-readback-failure")),
		maybe(boolFlag("--force-unload")),
	}},
	string(nodeagent.OpCleanCache): {Task: string(nodeagent.OpCleanCache)},
}

// ArgvSeparator joins a command's words for the policy's regular
// expression; no word may hold it.
const ArgvSeparator = "\n"

// Pattern is the anchored RE2 the command's words, joined by
// ArgvSeparator, match.
func (g ArgvGrammar) Pattern() string {
	var b strings.Builder
	b.WriteString("^" + regexp.QuoteMeta(AgentPath) + `\nnode-agent\n` + regexp.QuoteMeta(g.Task))
	for _, s := range g.Slots {
		alts := make([]string, len(s.OneOf))
		for i, f := range s.OneOf {
			for g := &f; g != nil; g = g.Then {
				alts[i] += `\n` + regexp.QuoteMeta(g.Name)
				if g.Value != "" {
					alts[i] += `\n(` + g.Value + `)`
				}
			}
		}
		b.WriteString("(" + strings.Join(alts, "|") + ")")
		if s.Optional {
			b.WriteString("?")
		}
	}
	b.WriteString("$")
	return b.String()
}

// Match reports whether argv is a command of g.
func (g ArgvGrammar) Match(argv []string) bool {
	for _, w := range argv {
		if strings.Contains(w, ArgvSeparator) {
			return false
		}
	}
	return regexp.MustCompile(g.Pattern()).MatchString(strings.Join(argv, ArgvSeparator))
}

// Build is the command of g with these flags (name, then its value for a
// flag that takes one), in g's order whatever order they come in. A flag
// g does not have is a programming error.
func (g ArgvGrammar) Build(flags ...string) []string {
	given := map[string]string{}
	for i := 0; i < len(flags); i++ {
		name := flags[i]
		f, ok := g.flag(name)
		if !ok {
			panic(fmt.Sprintf("tt: the %s helper has no flag %s", g.Task, name))
		}
		if f.Value != "" {
			i++
			given[name] = flags[i]
		} else {
			given[name] = ""
		}
	}
	argv := []string{AgentPath, "node-agent", g.Task}
	for _, s := range g.Slots {
		for _, f := range s.OneOf {
			if _, ok := given[f.Name]; !ok {
				continue
			}
			for h := &f; h != nil; h = h.Then {
				argv = append(argv, h.Name)
				if h.Value != "" {
					argv = append(argv, given[h.Name])
				}
			}
		}
	}
	return argv
}

func (g ArgvGrammar) flag(name string) (ArgvFlag, bool) {
	for _, f := range g.Flags() {
		if f.Name == name {
			return f, true
		}
	}
	return ArgvFlag{}, false
}

// Flags are every flag of g, those that follow another included.
func (g ArgvGrammar) Flags() []ArgvFlag {
	var out []ArgvFlag
	for _, s := range g.Slots {
		for _, f := range s.OneOf {
			for h := &f; h != nil; h = h.Then {
				out = append(out, *h)
			}
		}
	}
	return out
}

// agentCommand is the command of a task's helper with these flags.
func agentCommand(task string, flags ...string) []string {
	g, ok := HelperGrammars[task]
	if !ok {
		panic("tt: no helper task " + task)
	}
	return g.Build(flags...)
}
