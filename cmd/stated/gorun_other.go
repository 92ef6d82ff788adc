//go:build !linux

package main

import "log/slog"

// followGoRun does nothing off Linux: there is no parent-death signal.
func followGoRun(*slog.Logger) {}
