package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/tiered/memstore"
)

// scanAll scans view id of in in pages and returns "kg/key=value" strings.
func scanAll(t *testing.T, in *daemon.Instance, id []byte, s daemon.ViewScan) ([]string, int, error) {
	t.Helper()
	var out []string
	pages := 0
	err := in.ScanView(id, s, func(p daemon.ViewPage) error {
		pages++
		for _, e := range p.Entries {
			out = append(out, fmt.Sprintf("%d/%s=%s", e.KeyGroup, e.Key, e.Value))
		}
		if !p.Done && len(p.Cursor) == 0 {
			t.Fatalf("a page that is not the last has no cursor")
		}
		return nil
	})
	return out, pages, err
}

func TestViewLifecycle(t *testing.T) {
	for _, kind := range []backend.Kind{backend.KindHeap, backend.KindFile, backend.KindLSM} {
		t.Run(string(kind), func(t *testing.T) {
			e := newEnv(t, nil)
			in := e.open(t, "j", 0, kind)
			putN(t, in, 0, 200, "a")
			info, err := in.TakeView(0)
			if err != nil {
				t.Fatal(err)
			}
			if info.IdleTimeout != daemon.DefaultViewIdleTimeout || info.KeyGroups != in.KeyGroups || len(info.States) != 1 {
				t.Fatalf("view info %+v", info)
			}
			putN(t, in, 0, 300, "b")
			want, pages, err := scanAll(t, in, info.ID, daemon.ViewScan{})
			if err != nil || len(want) != 200 || pages != 1 {
				t.Fatalf("scan: %d entries in %d pages, %v; want the 200 written before the view in one page", len(want), pages, err)
			}
			for _, s := range want {
				if s[len(s)-len("=a0"):] == "=b0" {
					t.Fatalf("the view holds a write made after it: %s", s)
				}
			}
			// Small pages, resumed from each cursor and a page at a time,
			// give the same entries.
			var got []string
			var cursor []byte
			for i := 0; ; i++ {
				if i > 300 {
					t.Fatal("paged scan does not end")
				}
				var page []string
				done := false
				err := in.ScanView(info.ID, daemon.ViewScan{Cursor: cursor, PageBytes: 100, MaxPages: 1}, func(p daemon.ViewPage) error {
					for _, e := range p.Entries {
						page = append(page, fmt.Sprintf("%d/%s=%s", e.KeyGroup, e.Key, e.Value))
					}
					cursor, done = p.Cursor, p.Done
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, page...)
				if done {
					break
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("paged scan differs from the whole scan")
			}
			_, pages, err = scanAll(t, in, info.ID, daemon.ViewScan{PageBytes: 100})
			if err != nil || pages < 20 {
				t.Fatalf("a scan in pages of 100 bytes sent %d pages, %v", pages, err)
			}

			// Bad input.
			half := backend.KeyGroupRange{Start: in.KeyGroups.Start, End: in.KeyGroups.End + 1}
			if _, _, err := scanAll(t, in, info.ID, daemon.ViewScan{Range: &half}); !errors.Is(err, backend.ErrInvalidArgument) {
				t.Fatalf("scan of %s outside %s: %v", half, in.KeyGroups, err)
			}
			if _, _, err := scanAll(t, in, info.ID, daemon.ViewScan{Cursor: []byte("garbage")}); !errors.Is(err, backend.ErrInvalidArgument) {
				t.Fatalf("scan with a bad cursor: %v", err)
			}
			if _, _, err := scanAll(t, in, []byte("nope"), daemon.ViewScan{}); !errors.Is(err, backend.ErrNotFound) {
				t.Fatalf("scan of an unknown view: %v", err)
			}

			// At most DefaultMaxViewsPerInstance at once.
			ids := [][]byte{info.ID}
			for len(ids) < daemon.DefaultMaxViewsPerInstance {
				v, err := in.TakeView(0)
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, v.ID)
			}
			if _, err := in.TakeView(0); !errors.Is(err, daemon.ErrLimit) {
				t.Fatalf("view %d: %v, want ErrLimit", len(ids)+1, err)
			}
			if err := in.ReleaseView(ids[0]); err != nil {
				t.Fatal(err)
			}
			if err := in.ReleaseView(ids[0]); !errors.Is(err, backend.ErrNotFound) {
				t.Fatalf("second release: %v, want not found", err)
			}
			if _, _, err := scanAll(t, in, ids[0], daemon.ViewScan{}); !errors.Is(err, backend.ErrNotFound) {
				t.Fatalf("scan of a released view: %v", err)
			}
			if _, err := in.TakeView(0); err != nil {
				t.Fatalf("a view after one was released: %v", err)
			}
			// Closing the instance releases its views.
			if in.Views() != daemon.DefaultMaxViewsPerInstance {
				t.Fatalf("instance holds %d views", in.Views())
			}
			if err := e.d.CloseInstance(in.ID, "j"); err != nil {
				t.Fatal(err)
			}
			if in.Views() != 0 {
				t.Fatalf("a closed instance holds %d views", in.Views())
			}
			if _, _, err := scanAll(t, in, ids[1], daemon.ViewScan{}); !errors.Is(err, backend.ErrNotFound) {
				t.Fatalf("scan of a view of a closed instance: %v", err)
			}
			if _, err := in.TakeView(0); err == nil {
				t.Fatal("a view of a closed instance was taken")
			}
		})
	}
}

func TestViewIdleTimeout(t *testing.T) {
	e := newEnv(t, nil)
	in := e.open(t, "j", 0, backend.KindLSM)
	putN(t, in, 0, 50, "a")
	const idle = 50 * time.Millisecond
	v, err := in.TakeView(idle)
	if err != nil {
		t.Fatal(err)
	}
	// A scan that takes longer than the idle timeout keeps its view.
	n := 0
	err = in.ScanView(v.ID, daemon.ViewScan{PageBytes: 64}, func(p daemon.ViewPage) error {
		if n == 0 {
			time.Sleep(3 * idle)
		}
		n += len(p.Entries)
		return nil
	})
	if err != nil || n != 50 {
		t.Fatalf("a slow scan read %d entries, %v", n, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for in.Views() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("an idle view was never released")
		}
		time.Sleep(idle / 2)
	}
	if _, _, err := scanAll(t, in, v.ID, daemon.ViewScan{}); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("scan of a timed-out view: %v", err)
	}
	// The requested timeout is capped at the maximum.
	v2, err := in.TakeView(1000 * time.Hour)
	if err != nil || v2.IdleTimeout != daemon.DefaultMaxViewIdleTimeout {
		t.Fatalf("view with a huge idle timeout: %+v, %v", v2, err)
	}
	if _, err := in.TakeView(-time.Second); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("negative idle timeout: %v", err)
	}
}

func TestRegisterStates(t *testing.T) {
	e := newEnv(t, nil)
	in := e.open(t, "j", 0, backend.KindFile)
	late := backend.StateDescriptor{Name: "late", Kind: backend.KindMap}
	other := backend.StateDescriptor{Name: "other", Kind: backend.KindList}
	if _, kind := in.State([]byte("late")); kind != 0 {
		t.Fatal("late is known before it is registered")
	}
	// A conflict registers nothing, also not the valid states beside it.
	_, err := in.RegisterStates([]backend.StateDescriptor{other, {Name: "v", Kind: backend.KindList}})
	if !errors.Is(err, backend.ErrIncompatible) {
		t.Fatalf("register v as a list: %v", err)
	}
	_, err = in.RegisterStates([]backend.StateDescriptor{other, other})
	if !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("register a state twice in one request: %v", err)
	}
	_, err = in.RegisterStates([]backend.StateDescriptor{other, {Name: "", Kind: backend.KindValue}})
	if !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("register a state without a name: %v", err)
	}
	if _, kind := in.State([]byte("other")); kind != 0 {
		t.Fatal("a refused request registered a state")
	}
	states, err := in.RegisterStates([]backend.StateDescriptor{late, valueState[0]})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(states) != fmt.Sprint([]backend.StateDescriptor{late, valueState[0]}) {
		t.Fatalf("registered states %v", states)
	}
	if name, kind := in.State([]byte("late")); name != "late" || kind != backend.KindMap {
		t.Fatalf("late is %q %s after registration", name, kind)
	}
	if err := in.Backend.MapPut("late", backend.Key{KeyGroup: 0, Key: []byte("k")}, []byte("u"), []byte("x")); err != nil {
		t.Fatal(err)
	}
}

// A load into an instance in changelog mode goes through its log: a
// checkpoint taken right after it (no materialization) restores it.
func TestLoadChangelog(t *testing.T) {
	for _, kind := range []backend.Kind{backend.KindFile, backend.KindLSM} {
		t.Run(string(kind), func(t *testing.T) {
			store := memstore.New()
			e := newEnvOn(t, store, nil)
			in := e.openCL(t, "j", 0, kind, daemon.ChangelogOn, nil)
			var entries []backend.LoadEntry
			for i := 0; i < 100; i++ {
				entries = append(entries, backend.LoadEntry{KeyGroup: in.KeyGroups.Start + i%in.KeyGroups.Len(), State: "v",
					Key: []byte(fmt.Sprintf("k%d", i)), Value: []byte(fmt.Sprintf("l%d", i))})
			}
			batches := [][]backend.LoadEntry{entries[:40], entries[40:]}
			st, err := in.Load(func() ([]backend.LoadEntry, error) {
				if len(batches) == 0 {
					return nil, nil
				}
				b := batches[0]
				batches = batches[1:]
				return b, nil
			})
			if err != nil || st.Entries != 100 {
				t.Fatalf("load: %+v, %v", st, err)
			}
			checkN(t, in, 0, 100, "l")
			e.checkpoint(t, "j", 1, in)
			e2 := newEnvOn(t, store, nil)
			r := e2.openCL(t, "j", 0, kind, daemon.ChangelogOn, &daemon.RestoreSpec{Latest: true, NoClaim: true})
			checkN(t, r, 0, 100, "l")
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := e2.node.Shutdown(sctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	e := newEnv(t, nil)
	in := e.open(t, "j", 0, backend.KindLSM)
	bad := []backend.LoadEntry{{KeyGroup: in.KeyGroups.End + 1, State: "v", Key: []byte("k"), Value: []byte("x")}}
	once := false
	_, err := in.Load(func() ([]backend.LoadEntry, error) {
		if once {
			return nil, nil
		}
		once = true
		return bad, nil
	})
	if !errors.Is(err, backend.ErrKeyGroupOutOfRange) {
		t.Fatalf("load outside the range: %v", err)
	}
	boom := errors.New("stream broke")
	if _, err := in.Load(func() ([]backend.LoadEntry, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("load whose source fails: %v", err)
	}
	// The session lock was released each time.
	if _, err := in.Load(func() ([]backend.LoadEntry, error) { return nil, nil }); err != nil {
		t.Fatalf("empty load: %v", err)
	}
}
