package storeurl

import (
	"context"
	"fmt"
	"io"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cache"
)

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

// LocalCopy implements tiered.LocalCopies: uncached names have none.
func (p *partialCache) LocalCopy(ctx context.Context, name string) (tiered.LocalCopy, error) {
	if p.uncached(name) {
		return tiered.LocalCopy{}, fmt.Errorf("storeurl: %s is not cached: %w", name, tiered.ErrNoLocalCopy)
	}
	return p.Store.LocalCopy(ctx, name)
}
