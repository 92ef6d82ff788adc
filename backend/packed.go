package backend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/statedhq/stated/tiered"
)

// PackedStore returns s as the handles hs see it: a packed file
// (FileRef.Pack) is served under its own Path from the range of its pack
// object, with one ranged read, and an inline file (FileRef.Inline) from
// the handle's bytes, with no read; every other name goes to s
// unchanged. Writes, listings and deletes go to s. With no packed or
// inline file among hs it returns s itself. The caller keeps closing s; the view's Close does
// nothing.
func PackedStore(s tiered.Store, hs []*Handle) tiered.Store {
	var files map[string]FileRef
	for _, h := range hs {
		if h == nil {
			continue
		}
		for _, f := range h.Files {
			if f.Pack == nil && f.Inline == nil {
				continue
			}
			if files == nil {
				files = map[string]FileRef{}
			}
			files[f.Path] = f
		}
	}
	if files == nil {
		return s
	}
	return &packedStore{Store: s, files: files}
}

type packedStore struct {
	tiered.Store
	files map[string]FileRef
}

func (p *packedStore) Close() error { return nil }

// Unwrap is the store the view reads from (tiered.Unwrapper).
func (p *packedStore) Unwrap() tiered.Store { return p.Store }

func (p *packedStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	return p.GetRange(ctx, name, 0, -1)
}

func (p *packedStore) GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error) {
	f, ok := p.files[name]
	if !ok {
		return p.Store.GetRange(ctx, name, offset, length)
	}
	if offset < 0 || offset > f.Size || (offset == f.Size && f.Size > 0) {
		return nil, fmt.Errorf("%w: %s (%s): offset %d of a %d-byte file", tiered.ErrInvalidRange, name, where(f), offset, f.Size)
	}
	n := f.Size - offset
	if length >= 0 && length < n {
		n = length
	}
	if f.Inline != nil {
		return io.NopCloser(bytes.NewReader(f.Inline[offset : offset+n])), nil
	}
	rc, err := p.Store.GetRange(ctx, f.Pack.Object, f.Pack.Offset+offset, n)
	if err != nil {
		return nil, fmt.Errorf("%s (packed in %s at %d): %w", name, f.Pack.Object, f.Pack.Offset, err)
	}
	return &exactReader{rc: rc, left: n, name: name, pack: f.Pack.Object}, nil
}

func (p *packedStore) Stat(ctx context.Context, name string) (tiered.ObjectInfo, error) {
	f, ok := p.files[name]
	if !ok {
		return p.Store.Stat(ctx, name)
	}
	if f.Inline != nil {
		return tiered.ObjectInfo{Name: name, Size: f.Size}, nil
	}
	info, err := p.Store.Stat(ctx, f.Pack.Object)
	if err != nil {
		return tiered.ObjectInfo{}, fmt.Errorf("%s (packed in %s): %w", name, f.Pack.Object, err)
	}
	if info.Size < f.Pack.Offset+f.Size {
		return tiered.ObjectInfo{}, fmt.Errorf("%w: %s: pack %s has %d bytes, the file ends at %d", ErrCorrupt, name, f.Pack.Object, info.Size, f.Pack.Offset+f.Size)
	}
	return tiered.ObjectInfo{Name: name, Size: f.Size, ModTime: info.ModTime}, nil
}

// where says where a file of the view lies, for errors.
func where(f FileRef) string {
	if f.Inline != nil {
		return "inline in its handle"
	}
	return "packed in " + f.Pack.Object
}

// exactReader fails a read that ends before the file's last byte: a pack
// object shorter than its files' refs say is damage, not a short file.
type exactReader struct {
	rc         io.ReadCloser
	left       int64
	name, pack string
}

func (r *exactReader) Read(b []byte) (int, error) {
	n, err := r.rc.Read(b)
	r.left -= int64(n)
	if err == io.EOF && r.left > 0 {
		return n, fmt.Errorf("%w: %s: pack %s ended %d bytes before the file's end", ErrCorrupt, r.name, r.pack, r.left)
	}
	return n, err
}

func (r *exactReader) Close() error { return r.rc.Close() }

// NamePacks adds to a damage error the pack objects of the packed files
// it names. A packed file has no object of its own: an operator told that
// "j/chk-2/op-0/state-…" is corrupt must also be told which object in the
// store holds its bytes. err is returned unchanged when it is not damage
// (ErrCorrupt) or names no packed file of hs.
func NamePacks(err error, hs []*Handle) error {
	if err == nil || !errors.Is(err, ErrCorrupt) {
		return err
	}
	msg := err.Error()
	var notes []string
	seen := map[string]bool{}
	for _, h := range hs {
		if h == nil {
			continue
		}
		for _, f := range h.Files {
			if f.Pack == nil || seen[f.Path] || !strings.Contains(msg, f.Path) || strings.Contains(msg, f.Pack.Object) {
				continue
			}
			seen[f.Path] = true
			notes = append(notes, fmt.Sprintf("%s is bytes %d-%d of pack %s", f.Path, f.Pack.Offset, f.Pack.Offset+f.Size, f.Pack.Object))
		}
	}
	if len(notes) == 0 {
		return err
	}
	return fmt.Errorf("%w (%s)", err, strings.Join(notes, "; "))
}
