package tiered

import (
	"context"
	"errors"
)

// ErrNoLocalCopy is returned by LocalCopies.LocalCopy for an object the
// store keeps no local copy of (larger than its bound, or one it never
// caches): read it with Get.
var ErrNoLocalCopy = errors.New("no local copy")

// LocalCopies is an optional interface of a Store that keeps checksummed
// local copies of its objects in files (tiered/cache). A restore that
// needs an object as a local file (an lsm table) links that file instead
// of writing a second copy. Reach it with AsLocalCopies, which sees
// through WithPrefix views; the Store interface does not include it
// because only a cache has files to hand out.
type LocalCopies interface {
	// LocalCopy returns the local copy of name, downloading it first
	// (once, for every concurrent caller) when there is none. The file is
	// exactly the object's bytes and is never written again, so it may be
	// hard-linked; it may vanish at any time (eviction), so link or open
	// it and ask again if it is gone. The caller checks what it reads
	// against LocalCopy.CRC32C (or a checksum it knows) and calls
	// DropLocalCopy for a copy that does not match.
	LocalCopy(ctx context.Context, name string) (LocalCopy, error)
	// DropLocalCopy removes name's copy, which the caller found damaged;
	// the next LocalCopy downloads it again.
	DropLocalCopy(name string)
}

// LocalCopy is a local file holding an object.
type LocalCopy struct {
	// Path is the file.
	Path string
	// Size and CRC32C (Castagnoli, internal/frame's table) are those of
	// the object's bytes when the copy was made.
	Size   int64
	CRC32C uint32
	// Hit says the copy was there before the call (it was made earlier,
	// so it may have rotted since: check it); false says this call (or a
	// concurrent one) just downloaded it, checksumming as it wrote.
	Hit bool
}

// AsLocalCopies returns s's LocalCopies, seen through WithPrefix views.
func AsLocalCopies(s Store) (LocalCopies, bool) {
	return asThroughPrefix(s, AsLocalCopies, func(base LocalCopies, p *prefixed) LocalCopies {
		return prefixedCopies{base: base, p: p}
	})
}

// asThroughPrefix returns s's optional interface T, seen through WithPrefix
// views: as finds it on the view's base, and wrap makes the view's T from
// the base's. Not through Unwrappers: a wrapper that counts requests
// (tiered/metered) must see the calls an optional interface makes.
func asThroughPrefix[T any](s Store, as func(Store) (T, bool), wrap func(base T, p *prefixed) T) (T, bool) {
	var none T
	if p, ok := s.(*prefixed); ok {
		if p.err != nil {
			return none, false
		}
		base, ok := as(p.base)
		if !ok {
			return none, false
		}
		return wrap(base, p), true
	}
	t, ok := s.(T)
	return t, ok
}

type prefixedCopies struct {
	base LocalCopies
	p    *prefixed
}

func (c prefixedCopies) LocalCopy(ctx context.Context, name string) (LocalCopy, error) {
	n, err := c.p.full(name)
	if err != nil {
		return LocalCopy{}, err
	}
	return c.base.LocalCopy(ctx, n)
}

func (c prefixedCopies) DropLocalCopy(name string) {
	if n, err := c.p.full(name); err == nil {
		c.base.DropLocalCopy(n)
	}
}
