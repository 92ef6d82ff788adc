package inspect

import (
	"context"
	"errors"
	"io"

	"github.com/statedhq/stated/tiered"
)

// errReadOnly is what a write to the store a reader hands the backend
// returns: reading state must never change the store, and a backend that
// tried would be a bug worth an error rather than a silent write.
var errReadOnly = errors.New("inspect: the checkpoint store is read-only while state is read")

// readOnly passes reads to the store and refuses every write.
type readOnly struct{ s tiered.Store }

func (r readOnly) Put(context.Context, string, io.Reader, int64) error         { return errReadOnly }
func (r readOnly) PutIfAbsent(context.Context, string, io.Reader, int64) error { return errReadOnly }
func (r readOnly) Delete(context.Context, string) error                        { return errReadOnly }
func (r readOnly) DeleteBatch(context.Context, []string) error                 { return errReadOnly }

func (r readOnly) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	return r.s.Get(ctx, name)
}

func (r readOnly) GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error) {
	return r.s.GetRange(ctx, name, offset, length)
}

func (r readOnly) Stat(ctx context.Context, name string) (tiered.ObjectInfo, error) {
	return r.s.Stat(ctx, name)
}

func (r readOnly) List(ctx context.Context, prefix, startAfter string, limit int) (tiered.ListPage, error) {
	return r.s.List(ctx, prefix, startAfter, limit)
}

// Close does nothing: the caller owns the store.
func (r readOnly) Close() error { return nil }
