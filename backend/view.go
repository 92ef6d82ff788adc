package backend

// Viewer, KeyScanner and Loader are optional Backend extensions for an
// engine's state backend that writes its own snapshots from the daemon's
// state and restores from them (Flink's canonical key-grouped format): a
// frozen read view scanned in key-group order, the keys of one state, and a
// bulk load. Every backend kind of this module has all three (lsm, heap
// and file declare so at compile time); the daemon refuses the calls with
// ErrUnsupported for a backend that lacks one.

// Viewer freezes consistent read views of an instance.
type Viewer interface {
	// View freezes a read view of the state as it is now, without writing
	// any file: later writes are not in it. It is cheap (a copy-on-write
	// clone, a Pebble snapshot) and holds memory or obsolete versions
	// until Release. Entries whose TTL had passed when the view was taken
	// are left out of it. After Close it fails with ErrClosed.
	View() (View, error)
}

// View is a frozen read view. Scan may be called any number of times, from
// one goroutine at a time; Release may be called concurrently with Scan
// (it then waits for the Scan to return) and is idempotent. A view stays
// readable after the backend's Close until it is released.
type View interface {
	// States are the states registered when the view was taken, in the
	// order Scan visits them within a key group: by the length of the
	// name, then the name (the order of stored keys).
	States() []StateDescriptor
	// Scan calls fn for each entry of the key groups in r, in stored-key
	// order (key group, state, key, namespace, user key; timers by
	// timestamp after the state), starting after the entry whose Cursor
	// is after (nil: from the first), until fn returns false or an error,
	// which Scan returns. The entry and its slices are valid only during
	// the call. r must lie within the instance's range and after, when
	// set, must be a Cursor of an entry of r (ErrInvalidArgument
	// otherwise). After Release Scan fails with ErrClosed.
	Scan(r KeyGroupRange, after []byte, fn func(e *ViewEntry) (bool, error)) error
	// Release frees the view.
	Release()
}

// ViewEntry is one stored entry of a view: a value, a whole list, one map
// entry, an aggregate or a timer. Only the fields of its kind are set.
type ViewEntry struct {
	KeyGroup int
	// StateID indexes View.States.
	StateID   int
	State     string
	Kind      StateKind
	Key       []byte
	Namespace []byte
	// UserKey: map entries. Value: value states and map entries.
	UserKey []byte
	Value   []byte
	// Values: a list's live elements, in append order.
	Values [][]byte
	// Number: aggregates.
	Number Number
	// Timestamp: timers.
	Timestamp int64
	// Cursor is the entry's position, to resume a Scan after it.
	Cursor []byte
}

// StateKey is one (key, namespace) of a state.
type StateKey struct {
	KeyGroup  int
	Key       []byte
	Namespace []byte
}

// KeyScan bounds one page of KeyScanner.Keys.
type KeyScan struct {
	// Range restricts the scan; it must lie within the instance's range.
	Range KeyGroupRange
	// Namespace, when HasNamespace, lists only the keys of that namespace.
	HasNamespace bool
	Namespace    []byte
	// After resumes after the Cursor a previous page returned (nil: from
	// the start). It must lie in Range (ErrInvalidArgument otherwise).
	After []byte
	// Limit bounds the keys returned (> 0).
	Limit int
	// MaxRead bounds the stored entries read (> 0): a page ends there even
	// with fewer keys, so that a namespace filter that matches little
	// never holds the instance for long.
	MaxRead int
}

// KeyScanner lists the keys of live state and counts stored entries.
type KeyScanner interface {
	// Keys returns the distinct (key, namespace) pairs of a value, list,
	// map or aggregate state in stored-key order (key group, key,
	// namespace), one page as s bounds it; more says whether the scan
	// has not reached the end, and next is the After of the next page.
	// Expired entries not yet removed are listed.
	Keys(state string, s KeyScan) (keys []StateKey, next []byte, more bool, err error)
	// CountEntries counts the stored entries of state ("" for all states):
	// values, lists, map entries, aggregates and timers, expired ones not
	// yet removed included. It reads every entry.
	CountEntries(state string) (int64, error)
}

// LoadEntry is one entry of a bulk load: its address and what to store
// there, as in ViewEntry (State names the state; StateID, Kind and Cursor
// are not used).
type LoadEntry = ViewEntry

// Loader writes many entries at once.
type Loader interface {
	// Load starts a bulk load. Entries are given in batches to
	// LoadSession.Add and need not be sorted; the session may buffer
	// them (bounded) and makes them visible by Commit at the latest.
	// One session runs at a time per instance (a second Load waits).
	Load() (LoadSession, error)
}

// LoadSession is one bulk load. Each entry replaces what is stored at its
// address, as Put (value), MapPut (map entry), Delete then ListAppend (a
// whole list), an aggregate set to the number, or RegisterTimer would, with
// the state's TTL from now. Add checks every entry of a batch (state, kind,
// key group, sizes) before writing any of them and fails with the error of
// the first bad one. A session whose Add or Commit failed may have written
// part of its entries. Close ends the session; after Commit it is a no-op,
// before Commit it drops what is buffered.
type LoadSession interface {
	Add(entries []LoadEntry) error
	Commit() error
	Close()
}
