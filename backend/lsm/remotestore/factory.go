package remotestore

import (
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"
)

// Factory is a remote.StorageFactory with one Storage per locator, fixed
// when it is made. Pebble records the locator of every remote object in
// its catalog (REMOTE-OBJ-CATALOG), so a reopened store must be given a
// factory that knows every locator it used.
type Factory struct {
	storages map[remote.Locator]*Storage
}

var _ remote.StorageFactory = (*Factory)(nil)

// NewFactory makes a Storage of each options; it reports every invalid
// one at once, naming its locator. The empty locator is allowed: it is
// Pebble's default when Options.Experimental.CreateOnSharedLocator is
// unset.
func NewFactory(stores map[remote.Locator]Options) (*Factory, error) {
	if len(stores) == 0 {
		return nil, fmt.Errorf("remotestore: %w: a factory needs at least one locator", ErrInvalidOptions)
	}
	f := &Factory{storages: make(map[remote.Locator]*Storage, len(stores))}
	var errs []error
	for _, loc := range slices.Sorted(maps.Keys(stores)) {
		s, err := New(stores[loc])
		if err != nil {
			errs = append(errs, fmt.Errorf("locator %q: %w", loc, err))
			continue
		}
		f.storages[loc] = s
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return f, nil
}

// CreateStorage implements remote.StorageFactory. Every call for one
// locator returns the same Storage.
func (f *Factory) CreateStorage(locator remote.Locator) (remote.Storage, error) {
	s, ok := f.storages[locator]
	if !ok {
		return nil, fmt.Errorf("remotestore: %w %q (known: %q)", ErrUnknownLocator, locator, slices.Sorted(maps.Keys(f.storages)))
	}
	return s, nil
}

// Storage returns the Storage of locator, or nil.
func (f *Factory) Storage(locator remote.Locator) *Storage { return f.storages[locator] }
