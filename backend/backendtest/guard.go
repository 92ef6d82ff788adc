package backendtest

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
)

// errPanic marks the error a guarded call returns when the backend
// panicked. The panic is also reported as a test failure at once, so even a
// caller that expected some error cannot pass by accident.
var errPanic = errors.New("backendtest: backend panicked")

// reporter is what guard needs of a test: *testing.T and *rapid.T both fit.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// catch turns a panic into a test failure and an error.
func catch(r reporter, op string, err *error) {
	if p := recover(); p != nil {
		r.Errorf("backendtest: backend panicked in %s: %v\n%s", op, p, debug.Stack())
		if err != nil {
			*err = fmt.Errorf("%w in %s: %v", errPanic, op, p)
		}
	}
}

// guarded wraps a backend so that every call recovers panics (the contract:
// nothing panics). It embeds the backend so methods added to the interface
// later still pass through.
type guarded struct {
	backend.Backend
	r reporter
}

func guard(r reporter, b backend.Backend) *guarded { return &guarded{Backend: b, r: r} }

func (g *guarded) Info() (info backend.Info) {
	defer catch(g.r, "Info", nil)
	return g.Backend.Info()
}

func (g *guarded) States() (ds []backend.StateDescriptor) {
	defer catch(g.r, "States", nil)
	return g.Backend.States()
}

func (g *guarded) RegisterState(d backend.StateDescriptor) (err error) {
	defer catch(g.r, "RegisterState", &err)
	return g.Backend.RegisterState(d)
}

func (g *guarded) Get(state string, k backend.Key) (v []byte, ok bool, err error) {
	defer catch(g.r, "Get", &err)
	return g.Backend.Get(state, k)
}

func (g *guarded) Put(state string, k backend.Key, value []byte) (err error) {
	defer catch(g.r, "Put", &err)
	return g.Backend.Put(state, k, value)
}

func (g *guarded) Delete(state string, k backend.Key) (err error) {
	defer catch(g.r, "Delete", &err)
	return g.Backend.Delete(state, k)
}

func (g *guarded) ListAppend(state string, k backend.Key, values ...[]byte) (err error) {
	defer catch(g.r, "ListAppend", &err)
	return g.Backend.ListAppend(state, k, values...)
}

func (g *guarded) ListGet(state string, k backend.Key) (l [][]byte, err error) {
	defer catch(g.r, "ListGet", &err)
	return g.Backend.ListGet(state, k)
}

func (g *guarded) MapGet(state string, k backend.Key, uk []byte) (v []byte, ok bool, err error) {
	defer catch(g.r, "MapGet", &err)
	return g.Backend.MapGet(state, k, uk)
}

func (g *guarded) MapPut(state string, k backend.Key, uk, v []byte) (err error) {
	defer catch(g.r, "MapPut", &err)
	return g.Backend.MapPut(state, k, uk, v)
}

func (g *guarded) MapRemove(state string, k backend.Key, uk []byte) (err error) {
	defer catch(g.r, "MapRemove", &err)
	return g.Backend.MapRemove(state, k, uk)
}

func (g *guarded) MapContains(state string, k backend.Key, uk []byte) (ok bool, err error) {
	defer catch(g.r, "MapContains", &err)
	return g.Backend.MapContains(state, k, uk)
}

func (g *guarded) MapIterate(state string, k backend.Key, after []byte, limit int) (es []backend.MapEntry, more bool, err error) {
	defer catch(g.r, "MapIterate", &err)
	return g.Backend.MapIterate(state, k, after, limit)
}

func (g *guarded) AggregateAdd(state string, k backend.Key, v backend.Number) (err error) {
	defer catch(g.r, "AggregateAdd", &err)
	return g.Backend.AggregateAdd(state, k, v)
}

func (g *guarded) AggregateGet(state string, k backend.Key) (n backend.Number, ok bool, err error) {
	defer catch(g.r, "AggregateGet", &err)
	return g.Backend.AggregateGet(state, k)
}

func (g *guarded) RegisterTimer(state string, t backend.Timer) (err error) {
	defer catch(g.r, "RegisterTimer", &err)
	return g.Backend.RegisterTimer(state, t)
}

func (g *guarded) DeleteTimer(state string, t backend.Timer) (err error) {
	defer catch(g.r, "DeleteTimer", &err)
	return g.Backend.DeleteTimer(state, t)
}

func (g *guarded) PollTimers(state string, watermark int64, limit int) (ts []backend.Timer, err error) {
	defer catch(g.r, "PollTimers", &err)
	return g.Backend.PollTimers(state, watermark, limit)
}

func (g *guarded) Snapshot(ctx context.Context, id uint64) (p backend.PendingSnapshot, err error) {
	defer catch(g.r, "Snapshot", &err)
	p, err = g.Backend.Snapshot(ctx, id)
	if p != nil {
		p = &guardedPending{p: p, r: g.r}
	}
	return p, err
}

func (g *guarded) NotifyCheckpointComplete(id uint64) {
	defer catch(g.r, "NotifyCheckpointComplete", nil)
	g.Backend.NotifyCheckpointComplete(id)
}

func (g *guarded) NotifyCheckpointAborted(id uint64) {
	defer catch(g.r, "NotifyCheckpointAborted", nil)
	g.Backend.NotifyCheckpointAborted(id)
}

func (g *guarded) Close() (err error) {
	defer catch(g.r, "Close", &err)
	return g.Backend.Close()
}

// canonical returns the backend's CanonicalSnapshotter, guarded, if it has
// one.
func (g *guarded) canonical() (func(ctx context.Context, id uint64, store tiered.Store, dir string) (backend.PendingSnapshot, error), bool) {
	cs, ok := g.Backend.(backend.CanonicalSnapshotter)
	if !ok {
		return nil, false
	}
	return func(ctx context.Context, id uint64, store tiered.Store, dir string) (p backend.PendingSnapshot, err error) {
		defer catch(g.r, "CanonicalSnapshot", &err)
		p, err = cs.CanonicalSnapshot(ctx, id, store, dir)
		if p != nil {
			p = &guardedPending{p: p, r: g.r}
		}
		return p, err
	}, true
}

type guardedPending struct {
	p backend.PendingSnapshot
	r reporter
}

func (g *guardedPending) Run(ctx context.Context) (h *backend.Handle, err error) {
	defer catch(g.r, "PendingSnapshot.Run", &err)
	return g.p.Run(ctx)
}

func (g *guardedPending) Release() {
	defer catch(g.r, "PendingSnapshot.Release", nil)
	g.p.Release()
}
