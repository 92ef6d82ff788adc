// Package webui is the daemon's read-only web page: the jobs, each job's
// checkpoint history (as Flink's checkpoint tab shows it: id, status,
// trigger time, duration, sync and async parts, checkpointed and full
// size, failure reason, restored-from, pinned) with charts of duration and
// size over time, the open instances, the object-store requests of the
// last hour by kind with the estimated monthly bill, the store and cache
// counters and the savepoints. The node serves it on its metrics address
// under /ui/, with the same data as JSON under /ui/api/state.
//
// Each retained completed checkpoint links to its state page,
// /ui/checkpoint?job=J&id=N: a table of its states by entries and bytes
// and, per operator, a heat strip with one cell per key group (darker
// for more bytes), read by Source.States (the node's: package inspect
// over the checkpoint store, one read at a time, bounded in time, its
// results cached); /ui/api/checkpoint serves the same as JSON.
//
// The page is rendered on the server: HTML, CSS and the SVG charts come
// from this package (embedded), so it works with no external asset and no
// network, and reloads itself every few seconds. It never changes state.
//
// When the daemon has a token (Options.Token, for its TCP API) the page
// requires it too: as "Authorization: Bearer <token>", or once as
// ?token=<token>, which sets a cookie for the rest of the session.
package webui
