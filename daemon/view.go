package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/statedhq/stated/backend"
)

// Read views, key scans, late state registration and bulk loads: what an
// engine's state backend needs to write its own snapshots from an
// instance's state and to restore from them (docs/protocol.md, "Views and
// bulk load").
//
// A view is frozen by the backend (backend.Viewer) at a moment the batch
// path chooses (a barrier on the stream). The instance owns its views: at
// most ViewConfig.MaxPerInstance at once, each released by ReleaseView, by
// its idle timer (no scan for its idle timeout), or when the instance
// closes, so a client that dies never leaks one.

// Defaults of ViewConfig.
const (
	DefaultMaxViewsPerInstance = 4
	DefaultViewIdleTimeout     = 5 * time.Minute
	DefaultMaxViewIdleTimeout  = time.Hour
	// DefaultViewPageBytes is the page size of a scan that asks for none.
	DefaultViewPageBytes = 1 << 20
	// DefaultKeyScanMaxRead bounds the stored entries one key-scan page
	// reads (under the instance's reader lock).
	DefaultKeyScanMaxRead = 64 << 10
	// cursorVersion is the first byte of every scan cursor a client sees;
	// the rest is the stored key of the entry to resume after.
	cursorVersion = 1
)

// ViewConfig bounds the read views of instances.
type ViewConfig struct {
	// MaxPerInstance bounds the views one instance holds at once; another
	// fails with ErrLimit. Default DefaultMaxViewsPerInstance.
	MaxPerInstance int
	// IdleTimeout releases a view that no scan has used for this long,
	// unless its taker asked for another timeout. Default
	// DefaultViewIdleTimeout.
	IdleTimeout time.Duration
	// MaxIdleTimeout caps the idle timeout a taker may ask for. Default
	// DefaultMaxViewIdleTimeout.
	MaxIdleTimeout time.Duration
}

func (c *ViewConfig) ensureDefaults() {
	if c.MaxPerInstance == 0 {
		c.MaxPerInstance = DefaultMaxViewsPerInstance
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = DefaultViewIdleTimeout
	}
	if c.MaxIdleTimeout == 0 {
		c.MaxIdleTimeout = DefaultMaxViewIdleTimeout
	}
}

func (c *ViewConfig) validate() error {
	var errs []error
	if c.MaxPerInstance < 0 || c.IdleTimeout < 0 || c.MaxIdleTimeout < 0 {
		errs = append(errs, errors.New("daemon: negative view limit"))
	}
	if c.IdleTimeout > c.MaxIdleTimeout {
		errs = append(errs, fmt.Errorf("daemon: the view idle timeout %s is longer than its maximum %s", c.IdleTimeout, c.MaxIdleTimeout))
	}
	return errors.Join(errs...)
}

// viewSet is an instance's views.
type viewSet struct {
	mu     sync.Mutex
	byID   map[string]*view
	closed bool
}

// view is one held view. Its timer releases it when idle; scans count as
// users, during which it is never released by the timer.
type view struct {
	id    []byte
	v     backend.View
	idle  time.Duration
	timer *time.Timer
	// Guarded by viewSet.mu.
	users    int
	released bool
}

// ViewInfo describes a view taken.
type ViewInfo struct {
	ID []byte
	// States in scan order (backend.View.States); ViewEntry.StateID
	// indexes them.
	States      []backend.StateDescriptor
	KeyGroups   backend.KeyGroupRange
	IdleTimeout time.Duration
}

func (in *Instance) viewErr(format string, args ...any) error {
	return fmt.Errorf("daemon: view of %s: "+format, append([]any{in.Task}, args...)...)
}

// TakeView freezes a read view of the instance now. The caller orders it
// with the writes it must hold (the batch path takes it between two
// requests of the stream). idle is the view's idle timeout (0: the
// daemon's default; at most its maximum).
func (in *Instance) TakeView(idle time.Duration) (ViewInfo, error) {
	cfg := in.d.cfg.Views
	switch {
	case idle < 0:
		return ViewInfo{}, in.viewErr("%w: idle timeout %s is negative", backend.ErrInvalidArgument, idle)
	case idle == 0:
		idle = cfg.IdleTimeout
	case idle > cfg.MaxIdleTimeout:
		idle = cfg.MaxIdleTimeout
	}
	vr, ok := in.Backend.(backend.Viewer)
	if !ok {
		return ViewInfo{}, in.viewErr("%w: the %s backend has no read views", ErrUnsupported, in.Kind)
	}
	id := make([]byte, 16)
	if _, err := rand.Read(id); err != nil {
		return ViewInfo{}, in.viewErr("id: %w", err)
	}
	vs := &in.views
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if vs.closed {
		return ViewInfo{}, fmt.Errorf("daemon: %w %s of %s: closed", ErrUnknownInstance, in.IDString(), in.Task)
	}
	if len(vs.byID) >= cfg.MaxPerInstance {
		return ViewInfo{}, in.viewErr("%w: the instance holds %d views (max %d); release views with ReleaseView when their scan is done",
			ErrLimit, len(vs.byID), cfg.MaxPerInstance)
	}
	var bv backend.View
	err := in.snapshotLocked(func() (err error) {
		bv, err = vr.View()
		return err
	})
	if err != nil {
		return ViewInfo{}, in.viewErr("%w", err)
	}
	v := &view{id: id, v: bv, idle: idle}
	if vs.byID == nil {
		vs.byID = map[string]*view{}
	}
	vs.byID[string(id)] = v
	v.timer = time.AfterFunc(idle, func() { in.expireView(v) })
	return ViewInfo{ID: id, States: bv.States(), KeyGroups: in.KeyGroups, IdleTimeout: idle}, nil
}

// expireView releases v if no scan used it for its idle timeout.
func (in *Instance) expireView(v *view) {
	vs := &in.views
	vs.mu.Lock()
	if v.released || v.users > 0 {
		vs.mu.Unlock()
		return
	}
	in.dropViewLocked(v)
	vs.mu.Unlock()
	in.d.log.Info("view released after its idle timeout", "task", in.Task.String(), "view", hex.EncodeToString(v.id), "idle", v.idle)
	v.v.Release()
}

// dropViewLocked removes v from the set; the caller releases v.v outside
// the lock (it waits for a running scan).
func (in *Instance) dropViewLocked(v *view) {
	v.released = true
	v.timer.Stop()
	delete(in.views.byID, string(v.id))
}

// ReleaseView releases a view.
func (in *Instance) ReleaseView(id []byte) error {
	vs := &in.views
	vs.mu.Lock()
	v := vs.byID[string(id)]
	if v == nil {
		vs.mu.Unlock()
		return in.unknownView(id)
	}
	in.dropViewLocked(v)
	vs.mu.Unlock()
	v.v.Release()
	return nil
}

func (in *Instance) unknownView(id []byte) error {
	return fmt.Errorf("daemon: %w: view %s of %s: never taken, released, timed out after its idle timeout, or its instance closed",
		backend.ErrNotFound, hex.EncodeToString(id), in.Task)
}

// releaseViews releases every view; no view can be taken afterwards.
func (in *Instance) releaseViews() {
	vs := &in.views
	vs.mu.Lock()
	vs.closed = true
	views := make([]*view, 0, len(vs.byID))
	for _, v := range vs.byID {
		in.dropViewLocked(v)
		views = append(views, v)
	}
	vs.mu.Unlock()
	for _, v := range views {
		v.v.Release()
	}
}

// Views returns the number of views the instance holds.
func (in *Instance) Views() int {
	in.views.mu.Lock()
	defer in.views.mu.Unlock()
	return len(in.views.byID)
}

// ViewStates returns the states of view id, in scan order.
func (in *Instance) ViewStates(id []byte) ([]backend.StateDescriptor, error) {
	vs := &in.views
	vs.mu.Lock()
	defer vs.mu.Unlock()
	v := vs.byID[string(id)]
	if v == nil {
		return nil, in.unknownView(id)
	}
	return v.v.States(), nil
}

// acquireView marks a scan of view id as running (its idle timer stops).
func (in *Instance) acquireView(id []byte) (*view, error) {
	vs := &in.views
	vs.mu.Lock()
	defer vs.mu.Unlock()
	v := vs.byID[string(id)]
	if v == nil {
		return nil, in.unknownView(id)
	}
	v.users++
	v.timer.Stop()
	return v, nil
}

// releaseUse ends a scan; the idle timeout counts from now.
func (in *Instance) releaseUse(v *view) {
	vs := &in.views
	vs.mu.Lock()
	defer vs.mu.Unlock()
	v.users--
	if v.users == 0 && !v.released {
		v.timer.Reset(v.idle)
	}
}

// ViewScan is one ScanView call.
type ViewScan struct {
	// Range to scan; nil: the instance's whole range.
	Range *backend.KeyGroupRange
	// Cursor resumes after the page that returned it (nil: from the start).
	Cursor []byte
	// PageBytes is the target size of a page (<= 0: DefaultViewPageBytes).
	PageBytes int
	// MaxPages ends the scan after this many pages (<= 0: at the end).
	MaxPages int
}

// ViewPage is one page of a scan. Entries and their slices are valid only
// during the page callback.
type ViewPage struct {
	Entries []backend.ViewEntry
	// Cursor resumes after the page's last entry.
	Cursor []byte
	// Done: the range holds no entry after this page.
	Done bool
}

// EntrySize estimates what an entry costs in a response.
func EntrySize(e *backend.ViewEntry) int {
	n := 24 + len(e.Key) + len(e.Namespace) + len(e.UserKey) + len(e.Value)
	for _, v := range e.Values {
		n += 3 + len(v)
	}
	return n
}

func copyEntry(e *backend.ViewEntry) backend.ViewEntry {
	c := *e
	buf := make([]byte, 0, len(e.Key)+len(e.Namespace)+len(e.UserKey)+len(e.Value))
	take := func(b []byte) []byte {
		if b == nil {
			return nil
		}
		start := len(buf)
		buf = append(buf, b...)
		return buf[start:len(buf):len(buf)]
	}
	c.Key, c.Namespace, c.UserKey, c.Value = take(e.Key), take(e.Namespace), take(e.UserKey), take(e.Value)
	c.Values = nil
	if len(e.Values) > 0 {
		c.Values = make([][]byte, len(e.Values))
		for i, v := range e.Values {
			c.Values[i] = append([]byte{}, v...)
		}
	}
	c.Cursor = nil
	return c
}

// EncodeCursor and DecodeCursor turn a stored key into the opaque cursor a
// client holds and back.
func encodeCursor(k []byte) []byte { return append([]byte{cursorVersion}, k...) }

func (in *Instance) decodeCursor(c []byte) ([]byte, error) {
	if len(c) == 0 {
		return nil, nil
	}
	if c[0] != cursorVersion || len(c) < 3 {
		return nil, fmt.Errorf("daemon: %w: scan of %s: the cursor was not returned by this daemon's scans "+
			"(pass the cursor of the last page received, or none to start over)", backend.ErrInvalidArgument, in.Task)
	}
	return c[1:], nil
}

// ScanView scans view id page by page, calling page for each (which may
// block, sending it): a page is built, then sent outside the view's scan,
// so the daemon holds one page at a time.
func (in *Instance) ScanView(id []byte, s ViewScan, page func(p ViewPage) error) error {
	r := in.KeyGroups
	if s.Range != nil {
		r = *s.Range
	}
	if r.Empty() || !in.KeyGroups.Covers(r) {
		return fmt.Errorf("daemon: %w: scan of key groups %s of view %s: %s owns %s",
			backend.ErrInvalidArgument, r, hex.EncodeToString(id), in.Task, in.KeyGroups)
	}
	after, err := in.decodeCursor(s.Cursor)
	if err != nil {
		return err
	}
	pageBytes := s.PageBytes
	if pageBytes <= 0 {
		pageBytes = DefaultViewPageBytes
	}
	v, err := in.acquireView(id)
	if err != nil {
		return err
	}
	defer in.releaseUse(v)
	var entries []backend.ViewEntry
	for pages := 0; s.MaxPages <= 0 || pages < s.MaxPages; pages++ {
		entries = entries[:0]
		size, more := 0, false
		var last []byte
		err := v.v.Scan(r, after, func(e *backend.ViewEntry) (bool, error) {
			if len(entries) > 0 && size >= pageBytes {
				more = true
				return false, nil
			}
			entries = append(entries, copyEntry(e))
			size += EntrySize(e)
			last = append(last[:0], e.Cursor...)
			return true, nil
		})
		if err != nil {
			if errors.Is(err, backend.ErrClosed) {
				return in.unknownView(id)
			}
			return fmt.Errorf("daemon: scan of view %s of %s: %w", hex.EncodeToString(id), in.Task, err)
		}
		p := ViewPage{Entries: entries, Done: !more}
		if last != nil {
			p.Cursor = encodeCursor(last)
			after = append(after[:0:0], last...)
		} else {
			p.Cursor = s.Cursor
		}
		if err := page(p); err != nil {
			return err
		}
		if !more {
			return nil
		}
	}
	return nil
}

// KeyScan is one ScanKeys call.
type KeyScan struct {
	State string
	// Namespace, when HasNamespace, lists only that namespace's keys.
	HasNamespace bool
	Namespace    []byte
	// Range restricts the scan; nil: the instance's whole range.
	Range *backend.KeyGroupRange
	// Cursor resumes after the page that returned it.
	Cursor []byte
	// Limit bounds the keys of a page (> 0).
	Limit int
}

// ScanKeys returns one page of the keys of a state of the live instance.
func (in *Instance) ScanKeys(q KeyScan) (keys []backend.StateKey, cursor []byte, more bool, err error) {
	ks, ok := in.Backend.(backend.KeyScanner)
	if !ok {
		return nil, nil, false, fmt.Errorf("daemon: %w: the %s backend of %s has no key scans", ErrUnsupported, in.Kind, in.Task)
	}
	r := in.KeyGroups
	if q.Range != nil {
		r = *q.Range
	}
	after, err := in.decodeCursor(q.Cursor)
	if err != nil {
		return nil, nil, false, err
	}
	keys, next, more, err := ks.Keys(q.State, backend.KeyScan{Range: r, HasNamespace: q.HasNamespace, Namespace: q.Namespace,
		After: after, Limit: q.Limit, MaxRead: DefaultKeyScanMaxRead})
	if err != nil {
		return nil, nil, false, fmt.Errorf("daemon: key scan of state %q of %s: %w", q.State, in.Task, err)
	}
	if more {
		cursor = encodeCursor(next)
	}
	return keys, cursor, more, nil
}

// CountEntries counts the stored entries of state ("": all) of the live
// instance.
func (in *Instance) CountEntries(state string) (int64, error) {
	ks, ok := in.Backend.(backend.KeyScanner)
	if !ok {
		return 0, fmt.Errorf("daemon: %w: the %s backend of %s cannot count entries", ErrUnsupported, in.Kind, in.Task)
	}
	n, err := ks.CountEntries(state)
	if err != nil {
		return 0, fmt.Errorf("daemon: count entries of %s: %w", in.Task, err)
	}
	return n, nil
}

// setStates publishes the registered states for the batch path.
func (in *Instance) setStates(ds []backend.StateDescriptor) {
	m := make(map[string]stateInfo, len(ds))
	for _, s := range ds {
		m[s.Name] = stateInfo{name: s.Name, kind: s.Kind}
	}
	in.states.Store(&m)
}

// RegisterStates registers states after Open: all of them, or none when
// one is invalid, listed twice, or registered already with another
// descriptor. It returns every registered state, sorted by name.
func (in *Instance) RegisterStates(ds []backend.StateDescriptor) ([]backend.StateDescriptor, error) {
	if err := in.checkOpen(); err != nil {
		return nil, err
	}
	in.regMu.Lock()
	defer in.regMu.Unlock()
	have := map[string]backend.StateDescriptor{}
	for _, d := range in.Backend.States() {
		have[d.Name] = d
	}
	var errs []error
	seen := map[string]bool{}
	for _, d := range ds {
		if err := d.Validate(); err != nil {
			errs = append(errs, err)
			continue
		}
		if seen[d.Name] {
			errs = append(errs, fmt.Errorf("%w: state %q listed twice", backend.ErrInvalidArgument, d.Name))
		}
		seen[d.Name] = true
		if old, ok := have[d.Name]; ok && old != d {
			errs = append(errs, fmt.Errorf("%w: state %q is registered as %s (ttl %s), not as %s (ttl %s)",
				backend.ErrIncompatible, d.Name, describeState(old), old.TTL, describeState(d), d.TTL))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("daemon: register states of %s (none registered): %w", in.Task, err)
	}
	for _, d := range ds {
		if err := in.Backend.RegisterState(d); err != nil {
			in.setStates(in.Backend.States())
			return nil, fmt.Errorf("daemon: register state %q of %s: %w", d.Name, in.Task, err)
		}
	}
	states := in.Backend.States()
	in.setStates(states)
	sort.Slice(states, func(i, j int) bool { return states[i].Name < states[j].Name })
	return states, nil
}

func describeState(d backend.StateDescriptor) string {
	if d.Kind == backend.KindAggregate {
		return fmt.Sprintf("an aggregate (%s of %s)", d.Aggregate, d.Number)
	}
	return "a " + d.Kind.String() + " state"
}
