package daemon

import (
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
)

// The operator state's byte count always equals what its lists hold, so
// the bound is enforced exactly; reads return what a model holds; and no
// stored element changes when the caller's buffer or a later write does.
func TestOperatorStateModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		in := &Instance{ops: newOperatorState(nil)}
		type list struct {
			mode  backend.OperatorStateMode
			elems []string
		}
		model := map[string]*list{}
		names := []string{"a", "b", "c"}
		modes := []backend.OperatorStateMode{"", backend.OperatorSplit, backend.OperatorUnion}
		for i := range rapid.IntRange(1, 40).Draw(t, "n") {
			name := rapid.SampledFrom(names).Draw(t, "name")
			mode := rapid.SampledFrom(modes).Draw(t, "mode")
			var vals [][]byte
			for j := range rapid.IntRange(0, 3).Draw(t, "nv") {
				vals = append(vals, []byte(fmt.Sprint(i, "-", j)))
			}
			l := model[name]
			switch rapid.IntRange(0, 2).Draw(t, "op") {
			case 0:
				err := in.OperatorSet(name, mode, vals)
				if err != nil {
					t.Fatalf("set: %v", err)
				}
				if len(vals) == 0 {
					delete(model, name)
					break
				}
				m := mode
				if m == "" && l != nil {
					m = l.mode
				}
				if m == "" {
					m = backend.OperatorSplit
				}
				nl := &list{mode: m}
				for _, v := range vals {
					nl.elems = append(nl.elems, string(v))
				}
				model[name] = nl
			case 1:
				err := in.OperatorAppend(name, mode, vals)
				switch {
				case len(vals) == 0 || (l != nil && mode != "" && mode != l.mode):
					if !errors.Is(err, backend.ErrInvalidArgument) {
						t.Fatalf("append that must fail: %v", err)
					}
				case err != nil:
					t.Fatalf("append: %v", err)
				default:
					if l == nil {
						m := mode
						if m == "" {
							m = backend.OperatorSplit
						}
						l = &list{mode: m}
						model[name] = l
					}
					for _, v := range vals {
						l.elems = append(l.elems, string(v))
					}
				}
			case 2:
				got, found, err := in.OperatorGet(name)
				if err != nil || found != (l != nil) {
					t.Fatalf("get %s: %v found %v", name, err, found)
				}
				if l != nil {
					if got.Mode != l.mode || len(got.Elements) != len(l.elems) {
						t.Fatalf("get %s: %+v, want %+v", name, got, l)
					}
					for k, e := range got.Elements {
						if string(e) != l.elems[k] {
							t.Fatalf("get %s element %d: %q want %q", name, k, e, l.elems[k])
						}
					}
				}
			}
			for _, v := range vals {
				for k := range v {
					v[k] = 'X' // the caller reuses its buffer
				}
			}
			total := 0
			for _, l := range model {
				for _, e := range l.elems {
					total += len(e)
				}
			}
			if in.ops.bytes != total {
				t.Fatalf("byte count %d, lists hold %d", in.ops.bytes, total)
			}
			snap := in.OperatorState()
			if err := backend.ValidateOperatorState(snap); err != nil || len(snap) != len(model) {
				t.Fatalf("snapshot %+v: %v", snap, err)
			}
			for _, sl := range snap {
				ml := model[sl.Name]
				if ml == nil || fmt.Sprint(strs(sl.Elements)) != fmt.Sprint(ml.elems) || sl.Mode != ml.mode {
					t.Fatalf("snapshot list %s: %v, model %+v", sl.Name, strs(sl.Elements), ml)
				}
			}
		}
	})
}

func strs(b [][]byte) []string {
	out := make([]string, len(b))
	for i, e := range b {
		out[i] = string(e)
	}
	return out
}

func TestOperatorStateBound(t *testing.T) {
	in := &Instance{ops: newOperatorState(nil)}
	half := make([]byte, backend.MaxOperatorStateBytes/2)
	if err := in.OperatorSet("a", "", [][]byte{half}); err != nil {
		t.Fatal(err)
	}
	if err := in.OperatorAppend("b", "", [][]byte{half}); err != nil {
		t.Fatal(err)
	}
	if err := in.OperatorAppend("b", "", [][]byte{{1}}); !errors.Is(err, ErrLimit) {
		t.Fatalf("append past the bound: %v", err)
	}
	// Replacing a list counts what it frees.
	if err := in.OperatorSet("a", "", [][]byte{half}); err != nil {
		t.Fatalf("replace at the bound: %v", err)
	}
	if err := in.OperatorSet("a", "", nil); err != nil || in.ops.bytes != len(half) {
		t.Fatalf("remove: %v, %d bytes left", err, in.ops.bytes)
	}
	if err := backend.ValidateOperatorState(in.OperatorState()); err != nil {
		t.Fatal(err)
	}
}
