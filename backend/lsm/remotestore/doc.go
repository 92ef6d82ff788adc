// Package remotestore lets Pebble keep SSTs in stated's checkpoint store:
// it implements Pebble's remote.Storage (objstorage/remote) over a
// tiered.Store (a local directory, S3, or a cache over one), and a
// remote.StorageFactory that maps Pebble's locators to such stores.
//
// # Basics
//
// Pebble names the objects itself (objstorageprovider/remote_obj_name.go:
// "<hash>-<creator>-<filenum>.sst" and "<object>.ref.<creator>.<filenum>"
// markers); Storage passes the names through unchanged, so a store shared
// by several instances must be given one prefix per locator
// (tiered.WithPrefix) when their names could collide.
//
//   - ReadObject Stats the object once (unless Options.KnownSize knows its
//     size); every ReadAt is one ranged read (GetRange) of exactly the
//     bytes asked for, never the whole object.
//   - CreateObject spools the bytes (in memory up to
//     Options.SpoolMemoryBytes, then in a temporary file) and Puts them on
//     Close, because tiered.Store.Put needs the size before the first byte
//     and Pebble only knows it when the SST is finished.
//   - List follows the examples of remote.Storage.List: the prefix is cut
//     from the results, and with a delimiter, names that go on past it are
//     grouped into one result.
//   - IsNotExistError is true for errors wrapping tiered.ErrNotFound.
//
// # Caveats
//
// remote.Storage has no way to abandon a write: Pebble's sharedWritable
// calls Close from Abort too. A writer whose Write failed uploads nothing
// on Close; one that Pebble abandons after successful writes uploads what
// it was given, an object no ref marker points to, which the store's
// sweep must treat as an orphan.
//
// Calls of remote.Storage that take no context (CreateObject's Close,
// List, Delete, Size) run under Options.CallTimeout.
package remotestore
