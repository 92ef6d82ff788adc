package refcount

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"testing"

	"pgregory.net/rapid"
)

func objs(paths ...string) []Object {
	out := make([]Object, len(paths))
	for i, p := range paths {
		out[i] = Object{Path: p, Size: int64(len(p)), CRC32C: uint32(len(p)) + 1}
	}
	return out
}

func paths(os []Object) []string {
	var out []string
	for _, o := range os {
		out = append(out, o.Path)
	}
	return out
}

func TestRegisterUnregister(t *testing.T) {
	r := New()
	steps := []struct {
		op      string // "reg" or "unreg"
		owner   string
		objs    []string
		dropped []string
	}{
		{"reg", "j/chk-1", []string{"j/shared/a", "j/shared/b", "j/chk-1/op-0/m"}, nil},
		{"reg", "j/chk-2", []string{"j/shared/b", "j/shared/c", "j/chk-2/op-0/m", "j/shared/c"}, nil},
		{"unreg", "j/chk-1", nil, []string{"j/chk-1/op-0/m", "j/shared/a"}},
		{"unreg", "j/chk-1", nil, nil},
		{"reg", "savepoints/s1", []string{"savepoints/s1/data/x"}, nil},
		{"unreg", "j/chk-2", nil, []string{"j/chk-2/op-0/m", "j/shared/b", "j/shared/c"}},
		{"unreg", "savepoints/s1", nil, []string{"savepoints/s1/data/x"}},
	}
	for i, s := range steps {
		switch s.op {
		case "reg":
			if err := r.Register(s.owner, objs(s.objs...)); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		case "unreg":
			got := paths(r.Unregister(s.owner))
			if !reflect.DeepEqual(got, s.dropped) {
				t.Fatalf("step %d: unregister %s dropped %v, want %v", i, s.owner, got, s.dropped)
			}
		}
	}
	if st := r.Stats(); st != (Stats{}) {
		t.Fatalf("registry not empty at the end: %+v", st)
	}
}

func TestRegisterConflicts(t *testing.T) {
	r := New()
	if err := r.Register("a", objs("j/shared/x")); err != nil {
		t.Fatal(err)
	}
	if err := r.Register("a", objs("j/shared/x")); err != nil {
		t.Fatalf("re-registering the same owner with the same objects: %v", err)
	}
	if err := r.Register("a", objs("j/shared/y")); !errors.Is(err, ErrConflict) {
		t.Fatalf("owner re-registered with other objects: %v", err)
	}
	// Same name, other size: a reused object name must be refused, and
	// nothing of the failed registration may stay behind.
	err := r.Register("b", []Object{{Path: "j/shared/z", Size: 1}, {Path: "j/shared/x", Size: 999}})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("size conflict accepted: %v", err)
	}
	if r.Count("j/shared/z") != 0 || r.Has("b") {
		t.Fatal("failed registration left state behind")
	}
	if err := r.Register("c", []Object{{Path: "j/shared/x", Size: 10, CRC32C: 1}, {Path: "j/shared/x", Size: 10, CRC32C: 2}}); !errors.Is(err, ErrConflict) {
		t.Fatalf("one owner listing a name twice with two checksums: %v", err)
	}
	if err := r.Register("", nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty owner: %v", err)
	}
	if err := r.Register("d", []Object{{Path: ""}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("empty path: %v", err)
	}
}

// model is the obvious implementation: each owner's set of paths.
type model map[string]map[string]bool

func (m model) count(p string) int {
	n := 0
	for _, set := range m {
		if set[p] {
			n++
		}
	}
	return n
}

func TestRegistryProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := New()
		m := model{}
		universe := []string{"j/shared/a", "j/shared/b", "j/shared/c", "k/shared/a", "j/chk-1/t/f", "savepoints/s/data/j/shared/a"}
		ownerGen := rapid.SampledFrom([]string{"j/chk-1", "j/chk-2", "j/chk-3", "k/chk-1", "savepoints/s"})
		for step := 0; step < 60; step++ {
			owner := ownerGen.Draw(t, "owner")
			if rapid.Bool().Draw(t, "register") {
				ps := rapid.SliceOf(rapid.SampledFrom(universe)).Draw(t, "paths")
				err := r.Register(owner, objs(ps...))
				set := map[string]bool{}
				for _, p := range ps {
					set[p] = true
				}
				if old, ok := m[owner]; ok {
					if reflect.DeepEqual(old, set) != (err == nil) {
						t.Fatalf("re-register %s with %v (had %v): err %v", owner, ps, old, err)
					}
					continue
				}
				if err != nil {
					t.Fatalf("register %s: %v", owner, err)
				}
				m[owner] = set
			} else {
				dropped := paths(r.Unregister(owner))
				old := m[owner]
				delete(m, owner)
				var want []string
				for p := range old {
					if m.count(p) == 0 {
						want = append(want, p)
					}
				}
				sort.Strings(want)
				if !reflect.DeepEqual(dropped, want) {
					t.Fatalf("unregister %s dropped %v, want %v", owner, dropped, want)
				}
			}
			// Invariants: counts match the model, stats add up, and a
			// rebuild from the owners gives the same registry.
			var bytes int64
			live := 0
			for _, p := range universe {
				n := m.count(p)
				if got := r.Count(p); got != n {
					t.Fatalf("count(%s) = %d, want %d", p, got, n)
				}
				if n > 0 {
					live++
					bytes += int64(len(p))
				}
			}
			if st := r.Stats(); st.Objects != live || st.Bytes != bytes || st.Owners != len(m) {
				t.Fatalf("stats %+v, want %d objects %d bytes %d owners", st, live, bytes, len(m))
			}
			snap := map[string][]Object{}
			for _, o := range r.Owners() {
				snap[o] = r.Objects(o)
			}
			rb, refused := Rebuild(snap)
			if refused != nil {
				t.Fatal(refused)
			}
			for _, p := range universe {
				if rb.Count(p) != r.Count(p) {
					t.Fatalf("rebuilt count(%s) = %d, live %d", p, rb.Count(p), r.Count(p))
				}
			}
		}
	})
}

func ExampleRegistry() {
	r := New()
	_ = r.Register("job1/chk-1", []Object{{Path: "job1/shared/a", Size: 10}, {Path: "job1/shared/b", Size: 5}})
	_ = r.Register("job1/chk-2", []Object{{Path: "job1/shared/b", Size: 5}, {Path: "job1/shared/c", Size: 7}})
	// Checkpoint 1 is subsumed: only the file no one else references goes.
	for _, o := range r.Unregister("job1/chk-1") {
		fmt.Println("delete", o.Path)
	}
	// Output: delete job1/shared/a
}

// TestRebuildRefusesOnlyTheConflictingOwner: an owner that lists a name
// another owner registered with other bytes is refused alone; the others
// are registered as if it were absent.
func TestRebuildRefusesOnlyTheConflictingOwner(t *testing.T) {
	r, refused := Rebuild(map[string][]Object{
		"j/chk-1": {{Path: "j/shared/a", Size: 1}, {Path: "j/shared/b", Size: 2}},
		"j/chk-2": {{Path: "j/shared/b", Size: 3}, {Path: "j/shared/c", Size: 4}},
		"j/chk-3": {{Path: "j/shared/a", Size: 1}},
		"":        {{Path: "j/shared/d", Size: 1}},
	})
	if len(refused) != 2 || !errors.Is(refused["j/chk-2"], ErrConflict) || !errors.Is(refused[""], ErrInvalid) {
		t.Fatalf("refused %v, want j/chk-2 (conflict) and the empty owner (invalid)", refused)
	}
	if got := r.Owners(); !reflect.DeepEqual(got, []string{"j/chk-1", "j/chk-3"}) {
		t.Fatalf("owners %v", got)
	}
	for path, want := range map[string]int{"j/shared/a": 2, "j/shared/b": 1, "j/shared/c": 0, "j/shared/d": 0} {
		if got := r.Count(path); got != want {
			t.Errorf("count(%s) = %d, want %d", path, got, want)
		}
	}
}
