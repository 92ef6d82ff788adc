//go:build race

package e2e

// raceBuild: the test driver runs under the race detector.
const raceBuild = true
