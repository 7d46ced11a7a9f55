package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/term"
)

// progress shows a long operation's progress on one terminal line: done
// of total, the rate since the start and the time left at that rate. It
// exists only when stdout is a terminal (newProgress returns nil
// otherwise, and every method of a nil *progress does nothing), so a
// command's output piped or captured holds its results and nothing else.
type progress struct {
	mu    sync.Mutex
	w     io.Writer
	what  string // "verify"
	unit  string // "bytes", or a plural noun ("streams")
	now   func() time.Time
	start time.Time
	last  time.Time // last line drawn
	shown bool
}

// progressEvery is how often the line is redrawn at most.
const progressEvery = 100 * time.Millisecond

func newProgress(stdout io.Writer, what, unit string) *progress {
	f, ok := stdout.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return &progress{w: stdout, what: what, unit: unit, now: time.Now, start: time.Now()}
}

// fn returns the callback a library reports through (nil for a nil p).
func (p *progress) fn() func(done, total int64) {
	if p == nil {
		return nil
	}
	return p.update
}

func (p *progress) update(done, total int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if p.shown && now.Sub(p.last) < progressEvery && done < total {
		return
	}
	p.last, p.shown = now, true
	fmt.Fprint(p.w, "\r\033[K"+p.line(done, total, now.Sub(p.start)))
}

// line is the progress line (no newline).
func (p *progress) line(done, total int64, elapsed time.Duration) string {
	s := p.what + ": " + p.amount(done) + " of " + p.amount(total)
	if p.unit != "bytes" {
		s = fmt.Sprintf("%s: %d of %d %s", p.what, done, total, p.unit)
	}
	if total > 0 {
		s += fmt.Sprintf(" (%d%%)", done*100/total)
	}
	if secs := elapsed.Seconds(); secs > 0 && done > 0 {
		rate := float64(done) / secs
		if p.unit == "bytes" {
			s += ", " + humanBytes(int64(rate)) + "/s"
		} else {
			s += fmt.Sprintf(", %.1f %s/s", rate, p.unit)
		}
		if done < total {
			left := time.Duration(float64(total-done) / rate * float64(time.Second))
			s += ", ETA " + left.Round(time.Second).String()
		}
	}
	return s
}

func (p *progress) amount(n int64) string {
	if p.unit == "bytes" {
		return humanBytes(n)
	}
	return fmt.Sprintf("%d %s", n, p.unit)
}

// clear erases the line, before the command prints its results.
func (p *progress) clear() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\033[K")
		p.shown = false
	}
}

// humanBytes writes n bytes as "512 B", "1.5 KiB", "3.2 GiB".
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
