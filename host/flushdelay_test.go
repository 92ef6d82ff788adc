package host_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/memstore"
)

// TestChangelogFlushDelayByStore: left at 0, the changelog's flush delay
// follows its store (a local directory flushes within milliseconds, an
// object store gathers a second of changes per PUT); a delay given wins;
// a negative one is refused naming the option.
func TestChangelogFlushDelayByStore(t *testing.T) {
	dir := func(t *testing.T) tiered.Store {
		s, err := localfs.Open(filepath.Join(t.TempDir(), "log"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	for _, tc := range []struct {
		name  string
		log   func(*testing.T) tiered.Store
		delay time.Duration
		want  time.Duration
	}{
		{"object store", nil, 0, dstl.DefaultObjectStoreFlushDelay},
		{"local dir", dir, 0, dstl.DefaultFlushDelay},
		{"given", nil, 50 * time.Millisecond, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := host.Options{DataDir: t.TempDir(), Store: memstore.New(), NoSocket: true, Logger: quiet(), ChangelogFlushDelay: tc.delay}
			if tc.log != nil {
				o.LogStore = tc.log(t)
			}
			nd, err := host.Open(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			defer nd.Close()
			if got := nd.ChangelogWriter().Options().FlushDelay; got != tc.want {
				t.Fatalf("flush delay %v, want %v", got, tc.want)
			}
		})
	}
	_, err := host.Open(context.Background(), host.Options{DataDir: t.TempDir(), Store: memstore.New(), NoSocket: true, Logger: quiet(),
		ChangelogFlushDelay: -time.Second})
	if err == nil || !strings.Contains(err.Error(), "ChangelogFlushDelay") {
		t.Fatalf("a negative delay: %v", err)
	}
	_, err = host.Open(context.Background(), host.Options{DataDir: t.TempDir(), Store: memstore.New(), NoSocket: true, Logger: quiet(),
		ChangelogFlushSize: 200 << 20})
	if err == nil || !strings.Contains(err.Error(), "ChangelogMaxInFlight") {
		t.Fatalf("a flush size above the in-flight cap: %v", err)
	}
}
