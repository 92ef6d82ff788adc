package tiered

import "context"

// Preparer is an optional interface of a Store: it makes names ready
// ahead of their Put, so that the Put itself costs less. localfs
// implements it: a prepared name is an empty file whose directory entry
// is already durable, and its Put writes the data in place and syncs the
// data alone (one journal commit instead of the two of a new file
// renamed into place: the changelog's flush latency, see
// dstl.BenchmarkDurableWriteTail).
//
// The price is the Put's atomicity, which is why a store never prepares
// a name nobody asked for:
//   - until its Put, a prepared name reads as an empty object;
//   - a Put into a prepared name that fails removes what it wrote, but
//     one that a crash interrupts may leave part of its data under the
//     name.
//
// So only a writer whose names are new (never put before), whose readers
// verify checksums, and which references an object only once its Put
// returned may prepare names: the changelog's segments.
//
// Reach it with AsPreparer, which sees through WithPrefix views and
// wrappers that have an Unwrap method (tiered/metered).
type Preparer interface {
	// Prepare makes names ready. Names that exist already, or are
	// prepared, are left as they are. A name it could not prepare is
	// not an error of its Put later, which then writes the usual way.
	Prepare(ctx context.Context, names []string) error
	// Unprepare removes the prepared names whose Put never came (their
	// empty objects). It never removes an object a Put wrote.
	Unprepare(ctx context.Context, names []string) error
}

// Unwrapper is a Store that wraps another (tiered/metered); AsPreparer
// looks through it.
type Unwrapper interface {
	Unwrap() Store
}

// AsPreparer returns s's Preparer, seen through WithPrefix views and
// Unwrappers.
func AsPreparer(s Store) (Preparer, bool) {
	for {
		switch v := s.(type) {
		case *prefixed:
			if v.err != nil {
				return nil, false
			}
			base, ok := AsPreparer(v.base)
			if !ok {
				return nil, false
			}
			return prefixedPreparer{base: base, p: v}, true
		case Preparer:
			return v, true
		case Unwrapper:
			s = v.Unwrap()
		default:
			return nil, false
		}
	}
}

type prefixedPreparer struct {
	base Preparer
	p    *prefixed
}

func (pp prefixedPreparer) names(names []string) ([]string, error) {
	out := make([]string, len(names))
	for i, n := range names {
		f, err := pp.p.full(n)
		if err != nil {
			return nil, err
		}
		out[i] = f
	}
	return out, nil
}

func (pp prefixedPreparer) Prepare(ctx context.Context, names []string) error {
	full, err := pp.names(names)
	if err != nil {
		return err
	}
	return pp.base.Prepare(ctx, full)
}

func (pp prefixedPreparer) Unprepare(ctx context.Context, names []string) error {
	full, err := pp.names(names)
	if err != nil {
		return err
	}
	return pp.base.Unprepare(ctx, full)
}
