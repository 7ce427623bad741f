package ui

import (
	"io"
	"os"
	"strings"

	"github.com/charmbracelet/x/ansi"
	"golang.org/x/term"
)

// Width is w's terminal width in columns, read now (a resized window
// counts at the next line); 0 when w is not a terminal, where lines are
// never cut: a log keeps every word.
func Width(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0
	}
	cols, _, err := term.GetSize(int(f.Fd()))
	if err != nil || cols <= 0 {
		return 0
	}
	return cols
}

// Fit wraps every line of s that is wider than width at spaces (escape
// codes take no column; a word wider than the line is cut), continuation
// lines indented by indent columns; width 0 leaves s as it is. A terminal
// that wraps a line itself leaves its tail behind when a status line is
// redrawn, and a wrapped column no longer lines up.
func Fit(s string, width, indent int) string {
	if width <= 0 {
		return s
	}
	indent = min(indent, width/2)
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if ansi.StringWidth(l) > width {
			lines[i] = wrapLine(l, width, strings.Repeat(" ", indent))
		}
	}
	return strings.Join(lines, "\n")
}

func wrapLine(l string, width int, pad string) string {
	// The line's own leading spaces stay: they are its indentation.
	lead := len(l) - len(strings.TrimLeft(l, " "))
	var out []string
	cur, curW, empty := l[:min(lead, width/2)], min(lead, width/2), true
	next := func() {
		out = append(out, cur)
		cur, curW, empty = pad, len(pad), true
	}
	for _, word := range strings.Fields(l[lead:]) {
		ww := ansi.StringWidth(word)
		if !empty && curW+1+ww > width {
			next()
		}
		if !empty {
			cur, curW = cur+" ", curW+1
		}
		for curW+ww > width { // wider than a whole line: cut it
			room := width - curW
			cur += ansi.Cut(word, 0, room)
			word, ww = ansi.Cut(word, room, ww), ww-room
			next()
		}
		cur, curW, empty = cur+word, curW+ww, false
	}
	return strings.Join(append(out, cur), "\n")
}

// Truncate cuts s to width columns with "…"; width 0 leaves it whole.
func Truncate(s string, width int) string {
	if width <= 0 || ansi.StringWidth(s) <= width {
		return s
	}
	return ansi.Truncate(s, width, "…")
}

// ShortName fits a name into width columns by cutting its middle: cloud
// node names share long prefixes and differ at the end
// (gke-prod-pool-1-4f3a…-x7k2), so both ends are kept.
func ShortName(name string, width int) string {
	if width <= 0 || len(name) <= width {
		return name
	}
	if width < 5 {
		return name[:width]
	}
	tail := (width - 1) / 2
	return name[:width-1-tail] + "…" + name[len(name)-tail:]
}
