// Package refcount is stated's shared-file registry: which owner (a
// retained checkpoint or a savepoint) references which stored object, and
// which objects no owner references any more.
//
// # Basics
//
// An owner is registered once, with the complete list of objects it
// references, when it becomes durable: a checkpoint when it completes (never
// at upload time), a savepoint when its manifest is written. Unregister
// removes the owner and returns the objects whose count dropped to zero;
// those, and only those, may be deleted. The catalog package drives the
// registry and does the deleting.
//
// Every object is keyed by its full physical object name inside the
// checkpoint root (for example "job1/shared/7f3a-000012.sst"), never by a
// local file name or a (backend, file) pair: names of different jobs,
// backends or failovers can then never collide (FLINK-29913, FLINK-32761).
// Registering the same name with another size or checksum is an error
// (ErrConflict): one name must always mean the same bytes (FLINK-29095).
//
// The registry holds no state of its own worth persisting: catalog.Open
// rebuilds it from the retained manifests after a restart (Rebuild), so a
// daemon crash loses nothing. Rebuild refuses only the owners that
// conflict, and says which; the catalog then keeps their files.
//
// # Caveats
//
// The registry is an in-memory index; it never does I/O. It is safe for
// concurrent use, but callers that combine a registry check with a delete
// (the catalog) must hold their own lock across check and marking so that a
// concurrent registration cannot slip in between.
package refcount
