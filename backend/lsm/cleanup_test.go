package lsm

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// putLimit lets the first n writes through and fails every later one.
type putLimit struct {
	tiered.Store
	n atomic.Int64
}

var errPutRefused = errors.New("test: put refused")

func (s *putLimit) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	if s.n.Add(-1) < 0 {
		return errPutRefused
	}
	return s.Store.Put(ctx, name, r, size)
}

func (s *putLimit) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	if s.n.Add(-1) < 0 {
		return errPutRefused
	}
	return s.Store.PutIfAbsent(ctx, name, r, size)
}

// objects lists the names under prefix.
func objects(t *testing.T, s tiered.Store, prefix string) []string {
	t.Helper()
	var out []string
	after := ""
	for {
		page, err := s.List(context.Background(), prefix, after, 0)
		must(t, err)
		for _, o := range page.Objects {
			out = append(out, o.Name)
		}
		if page.Next == "" {
			return out
		}
		after = page.Next
	}
}

// TestFailedUploadUnderAPrefixLeavesNothing: under an ObjectPrefix (an
// engine owns the files and learns of them only from the handle), an
// upload that fails part way deletes what it wrote; the files of the
// earlier checkpoint it reuses stay. Without the cleanup the written
// shared SSTs stay in the engine's directory with no one to delete them.
func TestFailedUploadUnderAPrefixLeavesNothing(t *testing.T) {
	e := newEnv(t)
	limit := &putLimit{Store: e.store}
	limit.n.Store(1 << 30)
	e.store = limit
	b := e.open(full(), func(_ *backend.Options, lo *Options) { lo.ObjectPrefix = "ext/j/" })
	fill(t, b, full(), 3000, "a")
	// Settled, so that checkpoint 2's new file is not compacted with
	// checkpoint 1's (as in TestIncrementalWritesOnlyNewSSTs).
	must(t, b.DB().Compact(context.Background(), []byte{0}, []byte{0xff}, true))
	first := checkpoint(t, b, 1)
	b.NotifyCheckpointComplete(1)
	before := objects(t, e.store, "ext/")
	if len(before) != len(first.Files) {
		t.Fatalf("checkpoint 1 stored %d objects, its handle lists %d", len(before), len(first.Files))
	}
	fill(t, b, full(), 200, "b")
	must(t, b.db.Flush())
	limit.n.Store(2) // two files of checkpoint 2 go through, the next fails
	p, err := b.Snapshot(context.Background(), 2)
	must(t, err)
	if _, err := p.Run(context.Background()); !errors.Is(err, errPutRefused) {
		t.Fatalf("checkpoint 2 with a failing store: %v", err)
	}
	after := objects(t, e.store, "ext/")
	if strings.Join(after, "\n") != strings.Join(before, "\n") {
		t.Fatalf("after the failed upload the store holds\n%s\nwant checkpoint 1's only:\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
	// The instance still checkpoints, reusing checkpoint 1's files.
	limit.n.Store(1 << 30)
	h := checkpoint(t, b, 3)
	reused := 0
	for p := range sharedPaths(first) {
		if sharedPaths(h)[p] {
			reused++
		}
	}
	if reused == 0 {
		t.Fatalf("checkpoint 3 reuses none of checkpoint 1's files:\n%s", fileNames(h))
	}
}
