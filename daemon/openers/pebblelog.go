package openers

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
)

// PebbleLogger returns a pebble.Logger that writes to l with the attribute
// component=pebble. Pebble's informational lines (one per flush or
// compaction) go at level debug, so that they stay out of a daemon's log
// at the default level; its errors at level error. Fatalf logs, then
// panics instead of exiting: lsm turns a panic on the restore path (the
// only place where Pebble reads files it did not write) into an error,
// and elsewhere the panic still stops the process, as Pebble requires.
func PebbleLogger(l *slog.Logger) pebble.Logger { return pebbleLogger{l} }

type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) log(level slog.Level, format string, args ...any) string {
	msg := fmt.Sprintf(format, args...)
	p.l.Log(context.Background(), level, msg, "component", "pebble")
	return msg
}

func (p pebbleLogger) Infof(format string, args ...any)  { p.log(slog.LevelDebug, format, args...) }
func (p pebbleLogger) Errorf(format string, args ...any) { p.log(slog.LevelError, format, args...) }
func (p pebbleLogger) Fatalf(format string, args ...any) {
	panic("pebble: " + p.log(slog.LevelError, format, args...))
}
