package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"
)

// InputIsTerminal reports whether in is a terminal a person types at (a
// test's reader says so with IsTerminal).
func InputIsTerminal(in io.Reader) bool {
	if t, ok := in.(interface{ IsTerminal() bool }); ok {
		return t.IsTerminal()
	}
	f, ok := in.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// ConfirmOnTerminal asks question ([y/N]) on out when in is a terminal,
// after what (the consequence, one or more lines); off a terminal it asks
// nothing, so scripts run as before. Any answer but y or yes is
// ErrNotConfirmed (exit 3) after printing nothing.
func ConfirmOnTerminal(in io.Reader, out io.Writer, what, question, nothing string) error {
	if !InputIsTerminal(in) {
		return nil
	}
	fmt.Fprintln(out, what)
	fmt.Fprintf(out, "%s [y/N]: ", question)
	line, err := bufio.NewReader(in).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if answer := strings.ToLower(strings.TrimSpace(line)); answer != "y" && answer != "yes" {
		fmt.Fprintln(out, nothing)
		return WithExitCode(ExitBlocked, errors.New("not confirmed"))
	}
	return nil
}
