package tiered

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
)

// WithPrefix returns a view of s rooted at prefix: name "x" of the view is
// object "prefix/x" of s. Savepoints use it to read and write a
// self-contained directory, and the daemon to give each job its own root.
//
// prefix (one trailing "/" is ignored) must be a valid object name
// (ValidateName); "" returns s itself. An invalid prefix gives a view whose
// every operation fails with ErrInvalidName, so the mistake surfaces at the
// first use with the prefix named. Listing the view lists only objects
// under "prefix/" and strips it. Close of the view does not close s, which
// usually has other users: the caller that opened s closes it.
func WithPrefix(s Store, prefix string) Store {
	prefix = strings.TrimSuffix(prefix, "/")
	if prefix == "" {
		return s
	}
	if err := ValidateName(prefix); err != nil {
		return &prefixed{base: s, err: fmt.Errorf("tiered: prefix: %w", err)}
	}
	// A view of a view is one view of the base store, so errors and
	// listings do not pay for the nesting.
	if p, ok := s.(*prefixed); ok && p.err == nil {
		return &prefixed{base: p.base, prefix: p.prefix + prefix + "/"}
	}
	return &prefixed{base: s, prefix: prefix + "/"}
}

type prefixed struct {
	base   Store
	prefix string // ends in "/"
	err    error  // invalid prefix: every operation fails with it
}

func (p *prefixed) full(name string) (string, error) {
	if p.err != nil {
		return "", p.err
	}
	if err := ValidateName(name); err != nil {
		return "", err
	}
	return p.prefix + name, nil
}

func (p *prefixed) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	n, err := p.full(name)
	if err != nil {
		return err
	}
	return p.base.Put(ctx, n, r, size)
}

func (p *prefixed) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	n, err := p.full(name)
	if err != nil {
		return err
	}
	return p.base.PutIfAbsent(ctx, n, r, size)
}

func (p *prefixed) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	n, err := p.full(name)
	if err != nil {
		return nil, err
	}
	return p.base.Get(ctx, n)
}

func (p *prefixed) GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error) {
	n, err := p.full(name)
	if err != nil {
		return nil, err
	}
	return p.base.GetRange(ctx, n, offset, length)
}

func (p *prefixed) Stat(ctx context.Context, name string) (ObjectInfo, error) {
	n, err := p.full(name)
	if err != nil {
		return ObjectInfo{}, err
	}
	info, err := p.base.Stat(ctx, n)
	if err != nil {
		return ObjectInfo{}, err
	}
	info.Name = name
	return info, nil
}

func (p *prefixed) List(ctx context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	if p.err != nil {
		return ListPage{}, p.err
	}
	after := ""
	if startAfter != "" {
		after = p.prefix + startAfter
	}
	page, err := p.base.List(ctx, p.prefix+prefix, after, limit)
	if err != nil {
		return ListPage{}, err
	}
	out := ListPage{Objects: make([]ObjectInfo, 0, len(page.Objects))}
	for _, o := range page.Objects {
		rel, ok := strings.CutPrefix(o.Name, p.prefix)
		if !ok {
			// The base store broke its own contract; say so rather than
			// hand out a name outside the view.
			return ListPage{}, fmt.Errorf("tiered: list %q under prefix %q returned %q", prefix, p.prefix, o.Name)
		}
		o.Name = rel
		out.Objects = append(out.Objects, o)
	}
	if page.Next != "" {
		rel, ok := strings.CutPrefix(page.Next, p.prefix)
		if !ok {
			return ListPage{}, fmt.Errorf("tiered: list %q under prefix %q continued at %q", prefix, p.prefix, page.Next)
		}
		out.Next = rel
	}
	return out, nil
}

func (p *prefixed) Delete(ctx context.Context, name string) error {
	n, err := p.full(name)
	if err != nil {
		return err
	}
	return p.base.Delete(ctx, n)
}

func (p *prefixed) DeleteBatch(ctx context.Context, names []string) error {
	full := make([]string, len(names))
	for i, name := range names {
		n, err := p.full(name)
		if err != nil {
			return err
		}
		full[i] = n
	}
	return p.base.DeleteBatch(ctx, full)
}

// Close does not close the base store (see WithPrefix).
func (p *prefixed) Close() error { return nil }

// IsNotFound reports whether err says an object does not exist.
func IsNotFound(err error) bool { return errors.Is(err, ErrNotFound) }
