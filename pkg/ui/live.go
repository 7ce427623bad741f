package ui

import (
	"fmt"
	"io"
	"strings"
	"time"

	"golang.org/x/term"
)

// LiveTable is a table that --watch keeps current. On a terminal with room
// for it, a changed row is rewritten where it stands (the cursor moves up to
// it and back; the screen is never cleared, so what was above stays); a new
// row, a wider cell or a changed footer redraws the table's own lines.
// Elsewhere (a pipe, a log, a table taller than the screen) each changed
// row is printed again as a new line, as kubectl get --watch does.
type LiveTable struct {
	w       io.Writer
	headers []string
	keys    []string
	rows    map[string][]string
	footer  []string
	widths  []int
	drawn   int // lines on screen that belong to the table (in place)
	inPlace bool
}

// NewLiveTable writes to w.
func NewLiveTable(w io.Writer, headers []string) *LiveTable {
	return &LiveTable{w: w, headers: headers, rows: map[string][]string{}}
}

// Draw prints the whole table once: rows by key, in keys' order, and the
// footer lines under it.
func (t *LiveTable) Draw(keys []string, rows map[string][]string, footer []string) {
	t.keys, t.rows, t.footer = append([]string(nil), keys...), map[string][]string{}, footer
	for k, r := range rows {
		t.rows[k] = r
	}
	t.widths = t.measure()
	t.inPlace = t.fitsScreen()
	t.redraw()
}

// Update replaces (or adds) the row of key; a nil row removes it.
func (t *LiveTable) Update(key string, row []string) {
	_, had := t.rows[key]
	switch {
	case row == nil && !had:
		return
	case row == nil:
		delete(t.rows, key)
		for i, k := range t.keys {
			if k == key {
				t.keys = append(t.keys[:i], t.keys[i+1:]...)
				break
			}
		}
	case !had:
		t.rows[key] = row
		t.keys = append(t.keys, key)
	default:
		if strings.Join(t.rows[key], "\x00") == strings.Join(row, "\x00") {
			return
		}
		t.rows[key] = row
	}
	if !t.inPlace {
		if row != nil {
			fmt.Fprintln(t.w, t.format(row))
		}
		return
	}
	if !had || row == nil || t.wider(row) {
		t.widths = t.measure()
		t.redraw()
		return
	}
	t.rewrite(t.index(key), t.format(row))
}

// SetFooter replaces the lines under the table.
func (t *LiveTable) SetFooter(lines []string) {
	if strings.Join(lines, "\n") == strings.Join(t.footer, "\n") {
		return
	}
	t.footer = lines
	if !t.inPlace {
		for _, l := range lines {
			fmt.Fprintf(t.w, "%s %s\n", time.Now().UTC().Format("15:04:05"), l)
		}
		return
	}
	t.redraw()
}

func (t *LiveTable) index(key string) int {
	for i, k := range t.keys {
		if k == key {
			return i
		}
	}
	return -1
}

func (t *LiveTable) measure() []int {
	ws := make([]int, len(t.headers))
	for i, h := range t.headers {
		ws[i] = len(h)
	}
	for _, r := range t.rows {
		for i, c := range r {
			if i < len(ws) {
				ws[i] = max(ws[i], len([]rune(c)))
			}
		}
	}
	return ws
}

func (t *LiveTable) wider(row []string) bool {
	for i, c := range row {
		if i < len(t.widths) && len([]rune(c)) > t.widths[i] {
			return true
		}
	}
	return false
}

func (t *LiveTable) format(row []string) string {
	var b strings.Builder
	for i, c := range row {
		if i == len(row)-1 {
			b.WriteString(c)
			break
		}
		b.WriteString(c)
		if i < len(t.widths) {
			b.WriteString(strings.Repeat(" ", t.widths[i]-len([]rune(c))+2))
		}
	}
	line := strings.TrimRight(b.String(), " ")
	if t.inPlace {
		// A line the terminal wraps would put the cursor arithmetic off.
		line = Truncate(line, Width(t.w)-1)
	}
	return line
}

// fitsScreen: in place only on a terminal tall enough for every line.
func (t *LiveTable) fitsScreen() bool {
	f, ok := t.w.(interface{ Fd() uintptr })
	if !ok || !IsTerminal(t.w) {
		return false
	}
	_, rows, err := term.GetSize(int(f.Fd()))
	return err == nil && 1+len(t.keys)+len(t.footer) < rows
}

// redraw rewrites the table's own lines: up to its first, clear below.
func (t *LiveTable) redraw() {
	if t.inPlace && t.drawn > 0 {
		fmt.Fprintf(t.w, "\033[%dA\r\033[J", t.drawn)
	}
	if t.inPlace && !t.fitsScreen() {
		t.inPlace = false // grown past the screen: new lines from now on
	}
	headers := make([]string, len(t.headers))
	for i, h := range t.headers {
		headers[i] = strings.ToUpper(h)
	}
	lines := []string{t.format(headers)}
	for _, k := range t.keys {
		lines = append(lines, t.format(t.rows[k]))
	}
	lines = append(lines, t.footer...)
	for _, l := range lines {
		if t.inPlace {
			l = Truncate(l, Width(t.w)-1)
		}
		fmt.Fprintln(t.w, l)
	}
	t.drawn = len(lines)
}

// rewrite replaces line i of the rows (0: the first row) in place.
func (t *LiveTable) rewrite(i int, line string) {
	up := t.drawn - 1 - i // the header is line 0
	fmt.Fprintf(t.w, "\033[%dA\r\033[K%s\r\033[%dB", up, line, up)
}

// LiveText is a block of text --watch keeps current: on a terminal tall
// enough, the lines that changed are rewritten in place (no screen clear);
// elsewhere the block is printed again only when it changed.
type LiveText struct {
	w     io.Writer
	lines []string
}

// NewLiveText writes to w.
func NewLiveText(w io.Writer) *LiveText { return &LiveText{w: w} }

// Show draws text, or the lines of it that differ from the last drawing.
func (t *LiveText) Show(text string) {
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	f, ok := t.w.(interface{ Fd() uintptr })
	inPlace := false
	width := Width(t.w)
	if ok && width > 0 {
		if _, rows, err := term.GetSize(int(f.Fd())); err == nil {
			inPlace = max(len(lines), len(t.lines)) < rows
		}
	}
	if !inPlace {
		if strings.Join(lines, "\n") != strings.Join(t.lines, "\n") {
			if t.lines != nil {
				fmt.Fprintf(t.w, "--- %s\n", time.Now().UTC().Format("15:04:05"))
			}
			fmt.Fprintln(t.w, strings.Join(lines, "\n"))
		}
		t.lines = lines
		return
	}
	for i := range lines {
		lines[i] = Truncate(lines[i], width-1)
	}
	var b strings.Builder
	if len(t.lines) > 0 {
		fmt.Fprintf(&b, "\033[%dA\r", len(t.lines))
	}
	for i, l := range lines {
		if i < len(t.lines) && t.lines[i] == l {
			b.WriteString("\n") // unchanged: step over it
			continue
		}
		b.WriteString("\033[K" + l + "\n")
	}
	if len(lines) < len(t.lines) {
		b.WriteString("\033[J") // the block got shorter: clear its old tail
	}
	_, _ = io.WriteString(t.w, b.String())
	t.lines = lines
}
