package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/statedhq/stated/internal/bytesize"
	"github.com/statedhq/stated/tiered"
)

// progressOpts say where a long command (verify, gc) shows its progress.
// The zero value shows none.
type progressOpts struct {
	// w receives the progress; nil: none.
	w io.Writer
	// terminal draws a bar on w; otherwise w gets a plain line every
	// interval, which logs and CI output keep readable.
	terminal bool
	// every is the period of the plain lines.
	every time.Duration
}

// defaultProgressEvery is how often a command not on a terminal says how
// far it got.
const defaultProgressEvery = 5 * time.Second

// stderrProgress shows progress on stderr: a bar when stderr is a
// terminal, else periodic lines.
func stderrProgress() progressOpts {
	return progressOpts{w: os.Stderr, terminal: term.IsTerminal(int(os.Stderr.Fd())), every: defaultProgressEvery}
}

// start shows progress until stop is called: status returns the work done
// (against total; total <= 0: unknown, a spinner) and a description of it.
func (p progressOpts) start(label string, total int64, status func() (done int64, text string)) (stop func()) {
	if p.w == nil {
		return func() {}
	}
	every := p.every
	var bar *progressbar.ProgressBar
	if p.terminal {
		every = 100 * time.Millisecond
		if total <= 0 {
			total = -1
		}
		bar = progressbar.NewOptions64(total,
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(label),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
			progressbar.OptionShowBytes(true),
		)
	}
	if every <= 0 {
		every = defaultProgressEvery
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n, text := status()
				if bar != nil {
					bar.Describe(label + " " + text)
					_ = bar.Set64(n)
					continue
				}
				if total > 0 {
					fmt.Fprintf(p.w, "%s: %s (%d%%)\n", label, text, min(100, n*100/total))
				} else {
					fmt.Fprintf(p.w, "%s: %s\n", label, text)
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			if bar != nil {
				_ = bar.Clear()
			}
		})
	}
}

// countingStore counts what a command reads, lists and deletes through
// it, for its progress.
type countingStore struct {
	tiered.Store
	read    atomic.Int64 // bytes read from objects
	listed  atomic.Int64 // objects listed
	deleted atomic.Int64 // objects deleted
}

func (s *countingStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	rc, err := s.Store.Get(ctx, name)
	if err != nil {
		return nil, err
	}
	return countingReader{rc, &s.read}, nil
}

func (s *countingStore) GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error) {
	rc, err := s.Store.GetRange(ctx, name, offset, length)
	if err != nil {
		return nil, err
	}
	return countingReader{rc, &s.read}, nil
}

func (s *countingStore) List(ctx context.Context, prefix, startAfter string, limit int) (tiered.ListPage, error) {
	p, err := s.Store.List(ctx, prefix, startAfter, limit)
	s.listed.Add(int64(len(p.Objects)))
	return p, err
}

func (s *countingStore) Delete(ctx context.Context, name string) error {
	err := s.Store.Delete(ctx, name)
	if err == nil {
		s.deleted.Add(1)
	}
	return err
}

func (s *countingStore) DeleteBatch(ctx context.Context, names []string) error {
	err := s.Store.DeleteBatch(ctx, names)
	if err == nil {
		s.deleted.Add(int64(len(names)))
	}
	return err
}

type countingReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (r countingReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.n.Add(int64(n))
	return n, err
}

// readText describes bytes read against a total (<= 0: unknown).
func readText(n, total int64) string {
	if total > 0 {
		return fmt.Sprintf("read %s of %s", bytesize.Format(n), bytesize.Format(total))
	}
	return "read " + bytesize.Format(n)
}
