package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/fault"
)

// ModelConfig sizes RunModel.
type ModelConfig struct {
	// Seed makes the operation sequence reproducible.
	Seed uint64
	// Ops is the number of random operations. Default 400.
	Ops int
	// Names is the number of distinct object names. Default 12.
	Names int
	// MaxSize bounds the random object sizes. Default 64 KiB.
	MaxSize int
}

// absent stands for "no object" among the possible contents of a name.
const absent = "\x00absent"

// model tracks, for each name, the contents the store may hold: a failed
// write may or may not have taken effect, so a name can have several.
type model map[string]map[string]bool

func (m model) set(name string, vals ...string) {
	m[name] = map[string]bool{}
	for _, v := range vals {
		m[name][v] = true
	}
}

func (m model) add(name, v string) { m[name][v] = true }

func (m model) describe(name string) string {
	var out []string
	for v := range m[name] {
		if v == absent {
			out = append(out, "absent")
		} else {
			out = append(out, fmt.Sprintf("%d bytes", len(v)))
		}
	}
	slices.Sort(out)
	return strings.Join(out, " or ")
}

// RunModel runs a random sequence of operations against a store and a model
// of what it may hold, and fails t if the store ever returns data the model
// rules out: wrong or truncated bytes without an error, a missing object
// that must exist, a conditional put that won over an existing object.
//
// Errors other than not-found and exists are allowed (a faulty store may
// fail any call; the model then widens to both outcomes). At the end every
// name is rewritten and read back with retries: retrying finishes every
// job. Use it with a store that has faults somewhere inside (a fault
// wrapper around the store, or under a cache); RunUnderFaults does the
// former.
func RunModel(t *testing.T, h Harness, cfg ModelConfig) {
	if cfg.Ops == 0 {
		cfg.Ops = 400
	}
	if cfg.Names == 0 {
		cfg.Names = 12
	}
	if cfg.MaxSize == 0 {
		cfg.MaxSize = 64 << 10
	}
	s := newStore(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := rand.New(rand.NewPCG(cfg.Seed, 77))
	m := model{}
	var names []string
	for i := range cfg.Names {
		n := fmt.Sprintf("m/%d/obj-%d", i%3, i)
		names = append(names, n)
		m.set(n, absent)
	}
	value := func() string {
		n := r.IntN(cfg.MaxSize + 1)
		if r.IntN(8) == 0 {
			n = 0
		}
		return string(Data(r.Uint64(), n))
	}
	var counts [9]int
	for step := range cfg.Ops {
		name := names[r.IntN(len(names))]
		op := r.IntN(9)
		counts[op]++
		where := fmt.Sprintf("step %d (seed %d): ", step, cfg.Seed)
		switch op {
		case 0, 1: // put
			v := value()
			if err := tiered.PutBytes(ctx, s, name, []byte(v)); err != nil {
				m.add(name, v)
			} else {
				m.set(name, v)
			}
		case 2: // put-if-absent
			v := value()
			err := s.PutIfAbsent(ctx, name, strings.NewReader(v), int64(len(v)))
			switch {
			case err == nil:
				if !m[name][absent] {
					t.Fatalf("%sput-if-absent %s won, but the object must exist (%s)", where, name, m.describe(name))
				}
				m.set(name, v)
			case errors.Is(err, tiered.ErrExists):
				delete(m[name], absent)
				if len(m[name]) == 0 {
					t.Fatalf("%sput-if-absent %s: exists, but the object cannot exist", where, name)
				}
			default:
				if m[name][absent] {
					m.add(name, v)
				}
			}
		case 3, 4: // get
			b, err := tiered.ReadAll(ctx, s, name, 0)
			switch {
			case err == nil:
				if !m[name][string(b)] {
					t.Fatalf("%sget %s returned %d bytes the store cannot hold (%s)", where, name, len(b), m.describe(name))
				}
				m.set(name, string(b))
			case errors.Is(err, tiered.ErrNotFound):
				if !m[name][absent] {
					t.Fatalf("%sget %s: not found, but it must exist (%s): %v", where, name, m.describe(name), err)
				}
				m.set(name, absent)
			}
		case 5: // get-range
			off, length := int64(r.IntN(cfg.MaxSize/2+1)), int64(r.IntN(cfg.MaxSize/2+1))-1
			rc, err := s.GetRange(ctx, name, off, length)
			var b []byte
			if err == nil {
				b, err = io.ReadAll(rc)
				rc.Close()
			}
			if err == nil {
				ok := false
				for v := range m[name] {
					if v == absent || off > int64(len(v)) {
						continue
					}
					end := int64(len(v))
					if length >= 0 && off+length < end {
						end = off + length
					}
					if bytes.Equal(b, []byte(v[off:end])) {
						ok = true
					}
				}
				if !ok {
					t.Fatalf("%sget-range %s (%d, %d) returned %d bytes that match no possible content (%s)", where, name, off, length, len(b), m.describe(name))
				}
			}
		case 6: // stat
			info, err := s.Stat(ctx, name)
			switch {
			case err == nil:
				ok := false
				for v := range m[name] {
					ok = ok || (v != absent && int64(len(v)) == info.Size)
				}
				if !ok {
					t.Fatalf("%sstat %s: size %d matches no possible content (%s)", where, name, info.Size, m.describe(name))
				}
				delete(m[name], absent)
			case errors.Is(err, tiered.ErrNotFound):
				if !m[name][absent] {
					t.Fatalf("%sstat %s: not found, but it must exist (%s)", where, name, m.describe(name))
				}
				m.set(name, absent)
			}
		case 7: // delete, or a batch delete of a few names
			batch := []string{name}
			if r.IntN(2) == 0 {
				batch = append(batch, names[r.IntN(len(names))], names[r.IntN(len(names))])
			}
			var err error
			if len(batch) == 1 {
				err = s.Delete(ctx, name)
			} else {
				err = s.DeleteBatch(ctx, batch)
			}
			for _, n := range batch {
				if err == nil {
					m.set(n, absent)
				} else {
					m.add(n, absent)
				}
			}
		case 8: // list
			prefix := fmt.Sprintf("m/%d/", r.IntN(3))
			var listed []tiered.ObjectInfo
			after := ""
			var err error
			for {
				var page tiered.ListPage
				page, err = s.List(ctx, prefix, after, 1+r.IntN(4))
				if err != nil {
					break
				}
				listed = append(listed, page.Objects...)
				if page.Next == "" {
					break
				}
				after = page.Next
			}
			if err != nil {
				continue
			}
			seen := map[string]bool{}
			for _, o := range listed {
				seen[o.Name] = true
				if m[o.Name] == nil {
					t.Fatalf("%slist %s returned %s, which was never written", where, prefix, o.Name)
				}
				if len(m[o.Name]) == 1 && m[o.Name][absent] {
					t.Fatalf("%slist %s returned %s, which must be absent", where, prefix, o.Name)
				}
			}
			for _, n := range names {
				if strings.HasPrefix(n, prefix) && !m[n][absent] && !seen[n] {
					t.Fatalf("%slist %s misses %s, which must exist (%s)", where, prefix, n, m.describe(n))
				}
			}
		}
	}
	// Retrying finishes every job: rewrite each name and read it back.
	retry := func(what string, fn func() error) {
		t.Helper()
		var err error
		for range 60 {
			if err = fn(); err == nil {
				return
			}
		}
		t.Fatalf("%s still fails after 60 attempts: %v", what, err)
	}
	for i, name := range names {
		final := string(Data(uint64(i)+cfg.Seed<<8, 1+i*997))
		retry("final put of "+name, func() error { return tiered.PutBytes(ctx, s, name, []byte(final)) })
		retry("final get of "+name, func() error {
			b, err := tiered.ReadAll(ctx, s, name, 0)
			if err == nil && string(b) != final {
				t.Fatalf("final get %s: %d bytes, want %d", name, len(b), len(final))
			}
			return err
		})
	}
	retry("final delete-batch", func() error { return s.DeleteBatch(ctx, names) })
	for _, name := range names {
		retry("stat of deleted "+name, func() error {
			_, err := s.Stat(ctx, name)
			if err == nil {
				t.Fatalf("%s exists after a successful delete-batch", name)
			}
			if errors.Is(err, tiered.ErrNotFound) {
				return nil
			}
			return err
		})
	}
	t.Logf("model run: %d ops (put %d, put-if-absent %d, get %d, get-range %d, stat %d, delete %d, list %d)",
		cfg.Ops, counts[0]+counts[1], counts[2], counts[3]+counts[4], counts[5], counts[6], counts[7], counts[8])
}

// DefaultFaults is the fault mix RunUnderFaults injects: 10% errors, 5%
// lost replies, 10% truncated reads (reported), 5% writes broken part way,
// and a little latency.
func DefaultFaults(seed uint64) fault.Config {
	return fault.Config{
		Seed:             seed,
		ErrorRate:        0.10,
		LostReplyRate:    0.05,
		TruncateRate:     0.10,
		PartialWriteRate: 0.05,
		LatencyJitter:    200 * time.Microsecond,
	}
}

// RunUnderFaults runs the store in a fault wrapper twice: the acceptance
// suite with only latency injected (the wrapper must be transparent), and
// RunModel with DefaultFaults (nothing wrong is ever returned; retries
// finish every job). Pass the store's harness unchanged.
func RunUnderFaults(t *testing.T, h Harness, seed uint64) {
	h.defaults()
	inner := h.New
	wrap := func(cfg fault.Config) func(testing.TB) tiered.Store {
		return func(t testing.TB) tiered.Store { return fault.New(inner(t), cfg) }
	}
	t.Run("Transparent", func(t *testing.T) {
		hh := h
		hh.New = wrap(fault.Config{Seed: seed, LatencyJitter: 100 * time.Microsecond})
		if h.Reopen != nil {
			hh.Reopen = func(t testing.TB, old tiered.Store) tiered.Store {
				return fault.New(h.Reopen(t, old.(*fault.Store).Base()), fault.Config{})
			}
		}
		Run(t, hh)
	})
	t.Run("Model", func(t *testing.T) {
		hh := h
		cfg := DefaultFaults(seed)
		var fs *fault.Store
		hh.New = func(t testing.TB) tiered.Store {
			fs = fault.New(inner(t), cfg)
			return fs
		}
		RunModel(t, hh, ModelConfig{Seed: seed})
		st := fs.Stats()
		if st.Errors == 0 || st.LostReplies == 0 || st.Truncations == 0 || st.PartialWrites == 0 {
			t.Fatalf("the run injected too few faults to mean anything: %+v", st)
		}
		t.Logf("faults injected: %+v", st)
	})
}
