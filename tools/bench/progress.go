package bench

import (
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress shows one run's phases: on a terminal a progress bar per phase
// that has a measure of progress, and in any case one line per finished
// phase (the only output when not on a terminal, so logs stay readable).
type progress struct {
	w        io.Writer
	terminal bool
	label    string
}

func newProgress(w io.Writer, terminal bool, label string) *progress {
	return &progress{w: w, terminal: terminal, label: label}
}

// phase starts showing a phase. total > 0 and current != nil give a bar
// (on a terminal) that a goroutine updates from current every 100 ms; the
// returned stop ends that goroutine and clears the bar. Call stop once.
func (p *progress) phase(name string, total int64, current func() int64) (stop func()) {
	if !p.terminal || total <= 0 || current == nil {
		return func() {}
	}
	bar := progressbar.NewOptions64(total,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription(p.label+" "+name),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
		progressbar.OptionShowCount(),
	)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				_ = bar.Set64(min(current(), total))
			}
		}
	}()
	return func() {
		close(done)
		wg.Wait()
		_ = bar.Clear()
	}
}

// line prints a finished phase's summary.
func (p *progress) line(format string, args ...any) {
	fmt.Fprintf(p.w, "%s %s\n", p.label, fmt.Sprintf(format, args...))
}
