// Package localfs is the local-directory object store, stated's embedded
// default checkpoint storage.
//
// Every object is a file under the root directory at its name. Put writes a
// temporary file under <root>/.tmp, fsyncs it, renames it into place and
// fsyncs the parent directory, so a reader sees the whole object or none of
// it, also after a crash. A directory Put creates is synced into its
// parent, and Delete syncs the directories it changed before it returns:
// what a caller was told is stored (or deleted) stays so across a power
// loss. PutIfAbsent publishes with link(2), which fails if
// the name exists, so exactly one of concurrent callers wins. Open removes
// temporary files a crash left behind; one Store owns a directory at a time.
//
// The Store is a tiered.Preparer: Prepare links empty files at names that
// do not exist yet and syncs their directories, and the Put of a prepared
// name then writes in place and syncs the data alone (fdatasync), one
// journal commit instead of two. Such a Put is not atomic across a crash,
// so only the changelog's segments use it (see tiered.Preparer). A name
// is claimed while a Put writes it, so a Prepare can never put a
// placeholder under it, and Unprepare never removes what a Put wrote
// (TestPrepareConcurrentWithPuts).
//
// Every file and directory operation, fsyncs included, goes through
// Options.FS (the operating system's by default), so that tests can run
// the store on a file system that loses unsynced writes in a simulated
// power loss (vfs.NewCrashableMem).
package localfs
