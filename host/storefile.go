package host

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/statedhq/stated/tiered/storeurl"
)

// StoreFile is the file in the data dir where a node whose checkpoint
// store is not the default one under its data dir (every cluster node:
// theirs is shared) records its --checkpoint-store, so that the CLI's
// commands given only the data dir (`stated checkpoints --data-dir`)
// read the store the node serves. Written at each start, mode 0600 (the
// URL's query may hold settings an operator keeps out of logs).
const StoreFile = "checkpoint-store.url"

// recordStore writes o's checkpoint store URL to StoreFile, or removes a
// stale one when the store is the default.
func recordStore(o Options) error {
	path := filepath.Join(o.DataDir, StoreFile)
	if o.Store != nil {
		return nil // a test's store has no URL
	}
	if o.CheckpointStore == DefaultCheckpointStore(o.DataDir) {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing %s: %w", path, err)
		}
		return nil
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(o.CheckpointStore+"\n"), 0o600); err != nil {
		return fmt.Errorf("recording the checkpoint store in %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("recording the checkpoint store in %s: %w", path, err)
	}
	return nil
}

// RecordedStore is the checkpoint store URL a node serving from dataDir
// recorded (StoreFile); "" when it recorded none (its store is the
// default under the data dir).
func RecordedStore(dataDir string) (string, error) {
	path := filepath.Join(dataDir, StoreFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	u := strings.TrimSpace(string(b))
	if _, err := storeurl.Parse(u); err != nil {
		return "", fmt.Errorf("%s: %w (remove it, or give --checkpoint-store)", path, err)
	}
	return u, nil
}
