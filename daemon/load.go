package daemon

import (
	"fmt"

	"github.com/statedhq/stated/backend"
)

// LoadStats is what a bulk load wrote.
type LoadStats struct {
	Entries int64
	// Bytes: keys, namespaces, user keys, values and list elements.
	Bytes int64
}

// Load runs a bulk load: next returns the entries of the load batch by
// batch (the slices may be reused after the next call) and nil, nil at the
// end, through the backend's backend.Loader (an instance in changelog mode
// writes the entries through its log).
func (in *Instance) Load(next func() ([]backend.LoadEntry, error)) (LoadStats, error) {
	var st LoadStats
	if err := in.checkOpen(); err != nil {
		return st, err
	}
	l, ok := in.Backend.(backend.Loader)
	if !ok {
		return st, fmt.Errorf("daemon: %w: the %s backend of %s has no bulk load", ErrUnsupported, in.Kind, in.Task)
	}
	s, err := l.Load()
	if err != nil {
		return st, fmt.Errorf("daemon: load into %s: %w", in.Task, err)
	}
	defer s.Close()
	for {
		entries, err := next()
		if err != nil {
			return st, err
		}
		if entries == nil {
			break
		}
		if err := s.Add(entries); err != nil {
			return st, fmt.Errorf("daemon: load into %s (after %d entries): %w", in.Task, st.Entries, err)
		}
		st.Entries += int64(len(entries))
		for i := range entries {
			st.Bytes += int64(loadBytes(&entries[i]))
		}
	}
	if err := s.Commit(); err != nil {
		return st, fmt.Errorf("daemon: load into %s: %w", in.Task, err)
	}
	return st, nil
}

func loadBytes(e *backend.LoadEntry) int {
	n := len(e.Key) + len(e.Namespace) + len(e.UserKey) + len(e.Value)
	for _, v := range e.Values {
		n += len(v)
	}
	return n
}
