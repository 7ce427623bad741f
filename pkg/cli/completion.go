package cli

import (
	"regexp"
	"strings"

	"github.com/spf13/cobra"
)

// formatList is the list of -o values a flag's help gives: json|yaml|…,
// jsonpath=TEMPLATE, or "yaml or json".
var formatList = regexp.MustCompile(`[a-z][a-z-]*(?:=[A-Z]+)?(?:(?:\|| or )[a-z][a-z-]*(?:=[A-Z]+)?)+`)

// AddCompletions completes what a tree built elsewhere leaves open, as
// kubectl completes it: a command whose usage takes NODE completes node
// names, and every -o completes the formats its help lists.
func AddCompletions(root *cobra.Command, g *Globals) {
	for _, c := range root.Commands() {
		AddCompletions(c, g)
	}
	if strings.Contains(root.Use, "NODE") && root.ValidArgsFunction == nil {
		root.ValidArgsFunction = NodeCompletion(g)
	}
	f := root.Flags().Lookup("output")
	if f == nil {
		return
	}
	if _, ok := root.GetFlagCompletionFunc("output"); ok {
		return
	}
	var formats []string
	for _, v := range regexp.MustCompile(`\|| or `).Split(formatList.FindString(f.Usage), -1) {
		name, template, _ := strings.Cut(v, "=")
		switch {
		case name == "":
		case template != "" && name == "jsonpath":
			formats = append(formats, "jsonpath")
		case template == "":
			formats = append(formats, name)
		}
	}
	if len(formats) > 0 {
		_ = root.RegisterFlagCompletionFunc("output", completeOutput(formats))
	}
}
