package cli

// Progress bars: the one drawn on stderr while a volume is exported,
// imported or walked object by object, and the bar of the scrub and status
// lines.

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// byteBar draws a progress bar on stderr, at most 4 times a second. It may
// be updated from several goroutines. The work ends with finish (success)
// or abort (failure), which ends the bar's line.
type byteBar struct {
	g       *globals
	what    string
	objects bool // counts objects, not bytes
	mu      sync.Mutex
	start   time.Time
	shown   time.Time
	drawn   bool // the line holds a bar
	done    uint64
	total   uint64
}

func newByteBar(g *globals, what string) *byteBar {
	return &byteBar{g: g, what: what, start: time.Now()}
}

func (b *byteBar) update(done, total uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done, b.total = max(done, b.done), total
	if time.Since(b.shown) < 250*time.Millisecond {
		return
	}
	b.shown = time.Now()
	b.draw()
}

func (b *byteBar) draw() {
	if b.g.json {
		return
	}
	b.drawn = true
	el := time.Since(b.start).Seconds()
	eta := ""
	if b.done > 0 && b.done < b.total {
		eta = " ETA " + (time.Duration(el/float64(b.done)*float64(b.total-b.done)) * time.Second).Round(time.Second).String()
	}
	if b.objects {
		fmt.Fprintf(b.g.err, "\r%s %s %d / %d objects, %.0f/s%s   ", b.what, bar(int(b.done), int(max(b.total, 1)), 30),
			b.done, b.total, float64(b.done)/max(el, 1e-3), eta)
		return
	}
	rate := float64(b.done) / max(el, 1e-3) / 1e6
	fmt.Fprintf(b.g.err, "\r%s %s %s / %s, %.0f MB/s%s   ", b.what, bar(int(b.done>>20), int(max(b.total>>20, 1)), 30),
		humanBytes(int64(b.done)), humanBytes(int64(b.total)), rate, eta)
}

// finish draws the bar complete (the work succeeded, whatever the last
// update said: a diff, say, ends before the volume's end) and ends its line.
func (b *byteBar) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = max(b.done, b.total)
	b.draw()
	fmt.Fprintln(b.g.err)
}

// abort ends the bar's line as it stands, so an error printed next starts
// a line of its own.
func (b *byteBar) abort() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.drawn {
		fmt.Fprintln(b.g.err)
		b.drawn = false
	}
}

// newCountBar is a progress bar over objects.
func newCountBar(g *globals, what string) *byteBar {
	b := newByteBar(g, what)
	b.objects = true
	return b
}

// bar draws a progress bar of width cells.
func bar(done, total, width int) string {
	if total <= 0 {
		total = 1
	}
	n := min(width, done*width/total)
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", width-n) + "]"
}
