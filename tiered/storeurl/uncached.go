package storeurl

import (
	"context"
	"io"
	"path"

	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cache"
)

// CatalogMetadata reports whether name is a metadata object of the
// catalog: a job file "<job>/_catalog", which is rewritten in place, or a
// manifest "<job>/chk-<N>/_metadata" or "savepoints/<id>/_metadata", which
// is deleted with its checkpoint and may be written again under the same
// name. They are small and read when the daemon starts; a cached copy of
// one could be stale once another daemon has written the store (a failover
// to another host and back), so the daemon passes CatalogMetadata as
// Options.Uncached. Checkpoint data files are written once under unique
// names, and restores check them against the CRCs of their handles.
func CatalogMetadata(name string) bool {
	b := path.Base(name)
	return b == catalog.JobFileName || b == catalog.ManifestName
}

// partialCache is a cache whose uncached names go straight to the remote.
// List, Delete and DeleteBatch go through the cache, which forwards them
// (and drops local copies); Close closes the cache and so the remote.
type partialCache struct {
	*cache.Store
	remote   tiered.Store
	uncached func(string) bool
}

var _ tiered.Store = (*partialCache)(nil)

// route is the store name goes to: the remote for uncached names.
func (p *partialCache) route(name string) tiered.Store {
	if p.uncached(name) {
		return p.remote
	}
	return p.Store
}

func (p *partialCache) Put(ctx context.Context, name string, r io.Reader, size int64) error {
	return p.route(name).Put(ctx, name, r, size)
}

func (p *partialCache) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	return p.route(name).PutIfAbsent(ctx, name, r, size)
}

func (p *partialCache) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	return p.route(name).Get(ctx, name)
}

func (p *partialCache) GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, error) {
	return p.route(name).GetRange(ctx, name, offset, length)
}

func (p *partialCache) Stat(ctx context.Context, name string) (tiered.ObjectInfo, error) {
	return p.route(name).Stat(ctx, name)
}
