package lease

import "strings"

// secretFlags take a credential as their value; it must never reach a
// Lease, an event or a log.
var secretFlags = []string{"--token", "--password", "--username", "--client-key"}

// RedactArgs returns args with the values of credential flags replaced.
func RedactArgs(args []string) []string {
	out := make([]string, len(args))
	copy(out, args)
	for i := 0; i < len(out); i++ {
		for _, f := range secretFlags {
			switch {
			case strings.HasPrefix(out[i], f+"="):
				out[i] = f + "=REDACTED"
			case out[i] == f && i+1 < len(out):
				out[i+1] = "REDACTED"
				i++
			}
		}
	}
	return out
}
