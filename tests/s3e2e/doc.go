// Package s3e2e holds end-to-end tests of checkpoints to S3: an lsm backend
// checkpoints through tiered/s3store (the server named by
// STATED_TEST_S3_ENDPOINT, else in-process gofakes3), its local directory
// is deleted, and a restore from S3 must equal a model of the state; with
// a fault wrapper in between, every checkpoint completes correctly or fails
// with a clear reason, and nothing completed is lost. The daemon test does
// the same one level up: the daemon and its catalog, wired as stated serve
// wires them (the local cache in front of S3), run checkpoints of several
// tasks under faults, then lose their data directory and restore every
// task from S3. The package has only tests.
package s3e2e
