package tiered

import (
	"bytes"
	"context"
)

// Appender is an optional interface of a Store: Append stores a small new
// object durably by appending it to a log file the store keeps, instead
// of writing a file of its own. localfs implements it (see its package
// doc, "Packs"): the append writes in place into a preallocated file and
// syncs the data alone, with no file-system metadata to commit, and
// concurrent appends share one sync. That is what the changelog's flushes
// need to be durable within a few milliseconds on a local disk, where a
// new file per flush costs a journal commit (dstl.BenchmarkDurableWriteTail).
//
// The object is an ordinary one afterwards: Get, GetRange, Stat, List and
// Delete see it as if Put had stored it, from any process that opens the
// store. Append has Put's contract (atomic: once it returns nil the whole
// object is durable; a failed Append leaves nothing or the whole object);
// a store may store a large object as Put would.
//
// Reach it with AsAppender, which sees through WithPrefix views and
// Unwrappers; use AppendOrPut when any store will do.
type Appender interface {
	Append(ctx context.Context, name string, data []byte) error
}

// AsAppender returns s's Appender, seen through WithPrefix views and
// Unwrappers. A wrapper that implements Appender itself (tiered/metered
// counts the appends) is returned when the store it wraps appends.
func AsAppender(s Store) (Appender, bool) {
	switch v := s.(type) {
	case *prefixed:
		if v.err != nil {
			return nil, false
		}
		base, ok := AsAppender(v.base)
		if !ok {
			return nil, false
		}
		return prefixedAppender{base: base, p: v}, true
	case Unwrapper:
		if _, ok := AsAppender(v.Unwrap()); !ok {
			return nil, false
		}
		if a, ok := s.(Appender); ok {
			return a, true
		}
		return AsAppender(v.Unwrap())
	case Appender:
		return v, true
	}
	return nil, false
}

// AppendOrPut appends data under name if s is an Appender, and puts it
// otherwise.
func AppendOrPut(ctx context.Context, s Store, name string, data []byte) error {
	if a, ok := AsAppender(s); ok {
		return a.Append(ctx, name, data)
	}
	return s.Put(ctx, name, bytes.NewReader(data), int64(len(data)))
}

// Unwrapper is a Store that wraps another (tiered/metered); AsAppender
// looks through it.
type Unwrapper interface {
	Unwrap() Store
}

type prefixedAppender struct {
	base Appender
	p    *prefixed
}

func (pa prefixedAppender) Append(ctx context.Context, name string, data []byte) error {
	full, err := pa.p.full(name)
	if err != nil {
		return err
	}
	return pa.base.Append(ctx, full, data)
}
