// Package ptytest opens a pseudo-terminal of a chosen size, so a test can
// run a command with a terminal as its output and read what it drew.
package ptytest

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// PTY is an open pseudo-terminal: Tty is the terminal a program writes to,
// and everything written there is collected from the other side.
type PTY struct {
	Tty    *os.File
	master *os.File
	mu     sync.Mutex
	buf    bytes.Buffer
	done   chan struct{}
}

// Open opens a pseudo-terminal cols wide and rows high and starts reading it.
func Open(cols, rows int) (*PTY, error) {
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	fd := int(m.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		return nil, fmt.Errorf("unlockpt: %w", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("ptsname: %w", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		return nil, err
	}
	if err := unix.IoctlSetWinsize(int(s.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: uint16(cols), Row: uint16(rows)}); err != nil {
		m.Close()
		s.Close()
		return nil, err
	}
	p := &PTY{Tty: s, master: m, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		b := make([]byte, 32<<10)
		for {
			k, err := m.Read(b)
			p.mu.Lock()
			p.buf.Write(b[:k])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	return p, nil
}

// Output is everything written to the terminal so far.
func (p *PTY) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.String()
}

// Close closes the terminal and returns all that was written to it.
func (p *PTY) Close() string {
	_ = p.Tty.Close()
	<-p.done // the read ends with EIO once the terminal side is closed
	_ = p.master.Close()
	return p.Output()
}

var escape = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// Lines splits what a terminal shows into the runs of text between line
// breaks and carriage returns (a redrawn status line is one run per
// drawing), escape sequences removed.
func Lines(out string) []string {
	out = escape.ReplaceAllString(out, "")
	return strings.FieldsFunc(out, func(r rune) bool { return r == '\n' || r == '\r' })
}

// Columns is how many columns s takes on a terminal, for text of
// single-width characters (what rollbook prints: ASCII, box and braille
// glyphs).
func Columns(s string) int { return len([]rune(s)) }
