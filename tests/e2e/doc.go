// Package e2e holds end-to-end tests of the real stated binary: it is built
// once (TestMain), started on a temporary Unix socket, driven through the Go
// client and raw gRPC stubs, killed with SIGKILL and restarted.
//
// Run with: go test ./tests/e2e (add -short for a smaller run).
package e2e
