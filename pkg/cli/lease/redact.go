package lease

import (
	"net/url"
	"strings"
)

// secretFlags take a credential as their value; it must never reach a
// Lease, an event or a log. A webhook URL (--notify-url) keeps its secret in the path.
var secretFlags = []string{"--token", "--password", "--username", "--client-key", "--notify-url"}

// RedactArgs returns args with the values of credential flags replaced,
// and the query string and user info of every URL among them dropped (a
// presigned URL keeps its signature in the query).
func RedactArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = redactURLArg(a)
	}
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

// redactURLArg redacts arg when it is a URL or --flag=URL.
func redactURLArg(arg string) string {
	prefix, v := "", arg
	if strings.HasPrefix(arg, "-") {
		i := strings.Index(arg, "=")
		if i < 0 {
			return arg
		}
		prefix, v = arg[:i+1], arg[i+1:]
	}
	if !strings.Contains(v, "://") {
		return arg
	}
	u, err := url.Parse(v)
	if err != nil {
		return prefix + "REDACTED"
	}
	if u.User == nil && u.RawQuery == "" && !u.ForceQuery && u.Fragment == "" {
		return arg
	}
	q := u.RawQuery != "" || u.ForceQuery
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	if q {
		return prefix + u.String() + "?REDACTED"
	}
	return prefix + u.String()
}
