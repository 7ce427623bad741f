// Package ui renders what rollbook does for people and for scripts: live
// step progress, mutation lines, result summaries, tables and -o json|yaml.
package ui

import (
	"io"
	"os"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
	"golang.org/x/term"
)

// Style colours text when the output is a terminal and NO_COLOR is unset.
type Style struct {
	on                            bool
	ok, warn, bad, dim, bold, act lipgloss.Style
}

// NewStyle picks colours for w: from w's own terminal, not lipgloss's
// default (stdout), so progress on a terminal's stderr keeps its colours
// while `-o json > file` takes stdout.
func NewStyle(w io.Writer) Style {
	s := Style{on: IsTerminal(w) && os.Getenv("NO_COLOR") == ""}
	r := lipgloss.NewRenderer(w)
	if s.on && r.ColorProfile() == termenv.Ascii && os.Getenv("TERM") != "dumb" {
		// A terminal whose TERM says nothing (a bare pty, some CI
		// consoles) still shows the eight basic colours.
		r.SetColorProfile(termenv.ANSI)
	}
	s.ok = r.NewStyle().Foreground(lipgloss.Color("2"))
	s.warn = r.NewStyle().Foreground(lipgloss.Color("3"))
	s.bad = r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true)
	s.dim = r.NewStyle().Faint(true)
	s.bold = r.NewStyle().Bold(true)
	s.act = r.NewStyle().Foreground(lipgloss.Color("6"))
	return s
}

func (s Style) render(st lipgloss.Style, v string) string {
	if !s.on {
		return v
	}
	return st.Render(v)
}

// OK colours v as a success.
func (s Style) OK(v string) string { return s.render(s.ok, v) }

// Warn colours v as a warning.
func (s Style) Warn(v string) string { return s.render(s.warn, v) }

// Bad colours v as a failure.
func (s Style) Bad(v string) string { return s.render(s.bad, v) }

// Dim greys v out.
func (s Style) Dim(v string) string { return s.render(s.dim, v) }

// Bold emphasises v.
func (s Style) Bold(v string) string { return s.render(s.bold, v) }

// Act colours v as an action in progress.
func (s Style) Act(v string) string { return s.render(s.act, v) }

// IsTerminal reports whether w is a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
