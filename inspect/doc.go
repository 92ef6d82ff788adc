// Package inspect reads the keyed state of a checkpoint or savepoint as
// data, offline: from the checkpoint store alone, with no daemon running.
// It is what "stated state" (cmd/stated) lists, scans and exports.
//
// It writes no decoder of backend file formats of its own. Each task
// handle is restored, as a daemon would restore it, into a throwaway lsm
// instance in a temporary directory (lsm restores from lsm, file, heap
// and canonical handles alike, checking every file's size and CRC32C on
// the way; a changelog-mode handle goes through dstl/changelog, which
// restores its base into that instance and replays its log window); the reader then walks that instance's Pebble store in key
// order and takes each stored key and value apart by the frozen layout of
// backend/kvlayout, the one definition backend/internal/kvstate stores
// state with. Memory stays bounded by Pebble's
// small cache and one entry at a time; the disk holds one task's state at
// a time, deleted once the task is read.
//
// Reading never writes to the store: the restore runs without claim and
// every store handed to the backend refuses writes (readOnly). A task of
// lsm remote mode (SSTs referenced in place) is restored as an unclaimed
// remote restore does it: its SSTs ingested by reference and read from
// the store, each read whole and checked first (VerifyRestore), no hold
// or marker written, and the instance's own objects (its lease) kept in
// a throwaway store in the temporary directory.
//
// What it cannot read is refused with ErrUnsupported naming the task and
// the reason, never answered with no entries: a heap checkpoint read
// offline, whose files live in the daemon's memory (Options.HeapSnapshots
// lets a reader inside the daemon read them; a savepoint of a heap job is
// readable anywhere).
//
// Rewrite and WriteBootstrap write: a new canonical savepoint (Target),
// staged task by task in a throwaway lsm instance that writes its
// canonical snapshot into "savepoints/<id>/"; only names under that
// directory are written, the manifest last.
package inspect
