package cli

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// --notify-url-env is held to --notify-url's rules, and its value (the
// URL) is never what an error shows.
func TestNotifyURLFromTheEnvironment(t *testing.T) {
	t.Setenv("HOOK", "https://hooks.example/services/SECRET")
	t.Setenv("PLAIN_HOOK", "http://hooks.example/services/SECRET")
	t.Setenv("EMPTY", "")
	for _, c := range []struct {
		args    []string
		url     string
		refused string
	}{
		{[]string{"--notify-url-env", "HOOK"}, "https://hooks.example/services/SECRET", ""},
		{[]string{"--notify-url-env", "PLAIN_HOOK"}, "", "http only to a loopback address"},
		{[]string{"--notify-url-env", "EMPTY"}, "", "$EMPTY is empty or unset"},
		{[]string{"--notify-url-env", "NOT_SET_ANYWHERE"}, "", "$NOT_SET_ANYWHERE is empty or unset"},
		{[]string{"--notify-url-env", "hook; rm"}, "", "want an environment variable's name"},
		{[]string{"--notify-url-env", "HOOK", "--notify-url", "https://hooks.example/x"}, "", "give one"},
	} {
		var f SoakFlags
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		f.AddFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatalf("%v: %v", c.args, err)
		}
		err := f.Validate()
		switch {
		case c.refused == "" && (err != nil || f.NotifyURL != c.url):
			t.Errorf("%v: url %q, %v; want %q", c.args, f.NotifyURL, err, c.url)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%v: %v, want refused: %s", c.args, err, c.refused)
		case err != nil && strings.Contains(err.Error(), "SECRET"):
			t.Errorf("%v: the error shows the URL: %v", c.args, err)
		}
	}
}
