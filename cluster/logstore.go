package cluster

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"

	"github.com/statedhq/stated/cluster/raftlog"
)

// The raft dir's entries for the log (docs/cluster.md, "The raft log").
const (
	// logDirName holds the raft log and stable store (package raftlog).
	logDirName = "log"
	// walDirName held the log of stated versions that used raft-wal; it
	// is migrated into logDirName once and kept as walMigratedName.
	walDirName      = "wal"
	walMigratedName = "wal.migrated"
	// migratingName is the store a migration writes before it is
	// complete; a crash leaves it behind, and the next start begins anew.
	migratingName = "log.migrating"
	// migrateBatch and migrateBatchBytes bound one StoreLogs of a
	// migration (entries may be megabytes: the journal's values).
	migrateBatch      = 1024
	migrateBatchBytes = 16 << 20
)

// raft's stable keys (hashicorp/raft keeps them private): its term and
// its vote, which the migration carries over.
var (
	keyCurrentTerm  = []byte("CurrentTerm")
	keyLastVoteTerm = []byte("LastVoteTerm")
	keyLastVoteCand = []byte("LastVoteCand")
)

// ErrWALDamaged is wrapped when an old raft-wal log cannot be migrated
// because entries the node may have acknowledged cannot be read.
var ErrWALDamaged = errors.New("cluster: the raft-wal log cannot be migrated")

// openLogStore opens the raft log and stable store in dir/log, first
// migrating once a raft-wal log (dir/wal) an older stated left, and
// checks that raft can read every entry: raft panics at start on an entry
// it cannot read, so a damaged entry is refused here with a clear error.
// snapIndex is the index of the newest snapshot in dir (0: none).
func openLogStore(dir string, snapIndex uint64, id string, log *slog.Logger) (*raftlog.Store, error) {
	logDir, walDir := filepath.Join(dir, logDirName), filepath.Join(dir, walDirName)
	opts := raftlog.Options{Logger: log}
	hasLog, err := exists(logDir)
	if err != nil {
		return nil, err
	}
	hasWAL, err := exists(walDir)
	if err != nil {
		return nil, err
	}
	switch {
	case hasWAL && hasLog:
		// A migration completed, and the node stopped before the old log
		// was renamed aside: the new store is whole (it got its name last).
		if err := renameAside(dir, walDir, log); err != nil {
			return nil, err
		}
	case hasWAL:
		if err := migrateWAL(dir, snapIndex, id, opts, log); err != nil {
			return nil, err
		}
	}
	s, err := raftlog.Open(logDir, opts)
	if errors.Is(err, raftlog.ErrFormatVersion) {
		return nil, fmt.Errorf("cluster: raft log: %w", err)
	}
	if err != nil {
		return nil, fmt.Errorf("cluster: raft log: %w. %s", err, recoverAdvice(id, dir))
	}
	if _, err := s.Check(); err != nil {
		_ = s.Close()
		if errors.Is(err, raftlog.ErrCorrupt) { // it says what to do
			return nil, fmt.Errorf("cluster: raft log: %w", err)
		}
		return nil, fmt.Errorf("cluster: raft log: %w. %s", err, recoverAdvice(id, dir))
	}
	return s, nil
}

func exists(path string) (bool, error) {
	_, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("cluster: raft dir: %w", err)
	}
	return true, nil
}

// renameAside renames the migrated raft-wal dir to wal.migrated.
func renameAside(dir, walDir string, log *slog.Logger) error {
	aside := filepath.Join(dir, walMigratedName)
	if ok, err := exists(aside); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("cluster: raft dir %s holds both %s and %s: remove %s once you no longer need it (its log is in %s)",
			dir, walDirName, walMigratedName, walMigratedName, logDirName)
	}
	if err := os.Rename(walDir, aside); err != nil {
		return fmt.Errorf("cluster: keep the migrated raft-wal log aside: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	log.Info("the old raft-wal log is kept aside; remove it once the node runs well", "path", aside)
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("cluster: raft dir: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cluster: sync raft dir %s: %w", dir, err)
	}
	return nil
}

// migrateWAL copies the raft-wal log in dir/wal into a new store, which
// becomes dir/log only once complete, then renames dir/wal aside.
//
// raft-wal is used here only, to read the old log. An entry it cannot
// read (raft-wal v0.4.0's tail truncation seals a segment without its
// index, and every entry of that segment then fails with "sealed segment
// has no index block") is dropped, with every entry before it, when the
// newest snapshot covers it; otherwise the node may have acknowledged it
// and the migration is refused (ErrWALDamaged) with what to do.
func migrateWAL(dir string, snapIndex uint64, id string, opts raftlog.Options, log *slog.Logger) (err error) {
	walDir, tmp := filepath.Join(dir, walDirName), filepath.Join(dir, migratingName)
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("cluster: remove an unfinished migration: %w", err)
	}
	log.Info("migrating the raft log from raft-wal to the Pebble log store", "from", walDir)
	old, err := openWAL(walDir, log)
	if err != nil {
		return fmt.Errorf("%w. %s", err, recoverAdvice(id, dir))
	}
	defer func() {
		if cerr := old.close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	s, err := raftlog.Open(tmp, opts)
	if err != nil {
		return fmt.Errorf("cluster: raft log migration: %w", err)
	}
	defer func() {
		if s != nil { // not complete: nothing of it is kept
			_ = s.Close()
			_ = os.RemoveAll(tmp)
		}
	}()
	first, last, err := old.bounds()
	if err != nil {
		return fmt.Errorf("%w. %s", err, recoverAdvice(id, dir))
	}
	var (
		batch       []*raft.Log
		batchBytes  int
		badLo, bad  uint64 // the unreadable entries' lowest and highest index
		firstBadErr error
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := s.StoreLogs(batch); err != nil {
			return fmt.Errorf("cluster: raft log migration: %w", err)
		}
		batch, batchBytes = batch[:0], 0
		return nil
	}
	for i := first; first > 0 && i <= last; i++ {
		l := new(raft.Log)
		if gerr := old.getLog(i, l); gerr != nil {
			// Everything up to here is dropped: the log must stay
			// contiguous from its first entry to its last.
			if badLo == 0 {
				badLo, firstBadErr = i, gerr
			}
			bad, batch, batchBytes = i, batch[:0], 0
			if err := s.DeleteRange(first, i); err != nil {
				return fmt.Errorf("cluster: raft log migration: %w", err)
			}
			continue
		}
		batch, batchBytes = append(batch, l), batchBytes+len(l.Data)+len(l.Extensions)
		if len(batch) == migrateBatch || batchBytes >= migrateBatchBytes {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	if bad > snapIndex {
		return fmt.Errorf("%w: entries %d to %d of %s cannot be read (%v; raft-wal v0.4.0 loses the index of a segment it truncates), "+
			"and entries after index %d (the node's newest snapshot) may be ones this node acknowledged, so the node cannot start from this log. %s",
			ErrWALDamaged, badLo, bad, walDir, firstBadErr, snapIndex, recoverAdvice(id, dir))
	}
	if bad > 0 {
		log.Warn("raft-wal entries that cannot be read were dropped: the newest snapshot holds their effect",
			"first", first, "last_dropped", bad, "snapshot_index", snapIndex, "error", firstBadErr.Error())
	}
	entries := uint64(0)
	if first > 0 {
		entries = last - max(bad, first-1)
	}
	for _, k := range [][]byte{keyCurrentTerm, keyLastVoteTerm} {
		v, err := old.getUint64(k)
		if err != nil {
			return err
		}
		if v != 0 {
			if err := s.SetUint64(k, v); err != nil {
				return fmt.Errorf("cluster: raft log migration: %w", err)
			}
		}
	}
	if v, err := old.get(keyLastVoteCand); err != nil {
		return err
	} else if len(v) > 0 {
		if err := s.Set(keyLastVoteCand, v); err != nil {
			return fmt.Errorf("cluster: raft log migration: %w", err)
		}
	}
	if err := s.Close(); err != nil {
		return fmt.Errorf("cluster: raft log migration: %w", err)
	}
	s = nil
	if err := os.Rename(tmp, filepath.Join(dir, logDirName)); err != nil {
		return fmt.Errorf("cluster: raft log migration: %w", err)
	}
	if err := syncDir(dir); err != nil {
		return err
	}
	log.Info("migrated the raft log from raft-wal", "entries", entries, "first", first, "last", last, "to", filepath.Join(dir, logDirName))
	if err := old.close(); err != nil {
		return err
	}
	return renameAside(dir, walDir, log)
}

// recoverAdvice says how a node whose raft log is lost gets one again:
// from its peers, as a new member.
func recoverAdvice(id, dir string) string {
	return fmt.Sprintf("Recover the node from its peers: through a running member run `stated cluster leave --leaving-node-id %s`, "+
		"move %s aside, start this node with an empty raft dir and without --raft-peers, "+
		"then run `stated cluster join --new-node-id %s --new-raft-addr <its raft address>` through a member", id, dir, id)
}

// oldWAL is a raft-wal log opened for reading; every call recovers a
// panic of raft-wal into an error, at this boundary only.
type oldWAL struct {
	dir    string
	w      *wal.WAL
	meta   *metadb.BoltMetaDB
	closed bool
}

// guard runs f, turning a panic of raft-wal into an error naming what was
// being done.
func (o *oldWAL) guard(what string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: raft-wal panicked on %s in %s: %v", ErrWALDamaged, what, o.dir, r)
		}
	}()
	if err := f(); err != nil {
		return fmt.Errorf("cluster: raft-wal log in %s: %s: %w", o.dir, what, err)
	}
	return nil
}

func openWAL(dir string, log *slog.Logger) (*oldWAL, error) {
	o := &oldWAL{dir: dir, meta: &metadb.BoltMetaDB{}}
	err := o.guard("open", func() (err error) {
		o.w, err = wal.Open(dir, wal.WithMetaStore(o.meta), wal.WithLogger(newRaftLogger(log, "raft-wal")))
		return err
	})
	if err != nil {
		_ = o.guard("close its metadata", o.meta.Close)
		return nil, err
	}
	return o, nil
}

func (o *oldWAL) bounds() (first, last uint64, err error) {
	err = o.guard("read its bounds", func() (err error) {
		if first, err = o.w.FirstIndex(); err != nil {
			return err
		}
		last, err = o.w.LastIndex()
		return err
	})
	return first, last, err
}

func (o *oldWAL) getLog(i uint64, l *raft.Log) error {
	return o.guard(fmt.Sprintf("read entry %d", i), func() error { return o.w.GetLog(i, l) })
}

func (o *oldWAL) getUint64(k []byte) (v uint64, err error) {
	err = o.guard(fmt.Sprintf("read %s", k), func() (err error) { v, err = o.w.GetUint64(k); return err })
	return v, err
}

func (o *oldWAL) get(k []byte) (v []byte, err error) {
	err = o.guard(fmt.Sprintf("read %s", k), func() (err error) { v, err = o.w.Get(k); return err })
	return v, err
}

// close closes the log, then its metadata store (raft-wal's Close does
// not close the one it was given, whose file lock would otherwise stay).
func (o *oldWAL) close() error {
	if o.closed {
		return nil
	}
	o.closed = true
	err := o.guard("close", o.w.Close)
	if cerr := o.guard("close its metadata", o.meta.Close); err == nil {
		err = cerr
	}
	return err
}
