package memsnap

import (
	"fmt"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/internal/kvstate"
)

var (
	_ backend.Viewer     = (*Backend)(nil)
	_ backend.KeyScanner = (*Backend)(nil)
	_ backend.Loader     = (*Backend)(nil)
)

// View implements backend.Viewer: a copy-on-write clone of the tree, as a
// snapshot's synchronous part takes, which the task's writes never touch.
func (b *Backend) View() (backend.View, error) {
	v, err := b.State.FreezeView(func() (kvstate.Scanner, func(), error) {
		return b.tree.Clone(), nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: view of %s: %w", b.cfg.Kind, b.cfg.Options.Task, err)
	}
	return v, nil
}

// Load implements backend.Loader: each Add is written as one group under
// the writer lock (the tree has no faster bulk path).
func (b *Backend) Load() (backend.LoadSession, error) {
	return b.State.GroupLoad(&b.load), nil
}
