package apicmd

import (
	"io"
	"os"
	"strings"

	"github.com/rollbook/rollbook/pkg/cli"
)

// readData resolves -d: literal JSON, @FILE or @- (the command's input).
func readData(d string, g *cli.Globals) (string, error) {
	if !strings.HasPrefix(d, "@") {
		return d, nil
	}
	var (
		b   []byte
		err error
	)
	if d == "@-" {
		b, err = io.ReadAll(g.IOStreams.In)
	} else {
		b, err = os.ReadFile(d[1:])
	}
	if err != nil {
		return "", cli.UsageErrorf("-d %s: %v", d, err)
	}
	return string(b), nil
}
