package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/rollbook/rollbook/sim/monitor"
)

// cmdViolations prints the safety violations the monitor recorded in DIR and
// exits 1 when there are any, so scripts can use it as a check.
func cmdViolations(args []string) int {
	fs := flag.NewFlagSet("violations", flag.ContinueOnError)
	dir := fs.String("dir", "", "the sim's state directory (required)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "sim violations: --dir is required")
		return 2
	}
	vs, err := monitor.Read(*dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sim violations:", err)
		return 2
	}
	for _, v := range vs {
		fmt.Printf("%s  %-34s %-40s %s\n", v.Time.Format("15:04:05.000"), v.Rule, v.Object, v.Detail)
	}
	if len(vs) > 0 {
		fmt.Fprintf(os.Stderr, "%d safety violation(s)\n", len(vs))
		return 1
	}
	fmt.Println("no violations")
	return 0
}
