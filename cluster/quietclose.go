package cluster

import (
	"context"
	"log/slog"
	"strings"
)

// quietClosed is the node's log handler: a record whose error says the
// connection was already closed ("use of closed network connection") is
// lowered to debug. raft's transport logs one at level error for every
// inbound connection when the node itself closes it, at each clean
// shutdown: no fault, and an operator alerting on errors must not see
// one.
type quietClosed struct{ h slog.Handler }

// quiet wraps log's handler (once).
func quiet(log *slog.Logger) *slog.Logger {
	if _, ok := log.Handler().(quietClosed); ok {
		return log
	}
	return slog.New(quietClosed{log.Handler()})
}

func (q quietClosed) Enabled(ctx context.Context, l slog.Level) bool { return q.h.Enabled(ctx, l) }

func (q quietClosed) Handle(ctx context.Context, r slog.Record) error {
	if r.Level > slog.LevelDebug && closedConn(r) {
		if !q.h.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return q.h.Handle(ctx, r)
}

func (q quietClosed) WithAttrs(as []slog.Attr) slog.Handler { return quietClosed{q.h.WithAttrs(as)} }
func (q quietClosed) WithGroup(name string) slog.Handler    { return quietClosed{q.h.WithGroup(name)} }

// closedConn reports whether r's error attribute says a connection this
// process closed was used.
func closedConn(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "error" && strings.Contains(a.Value.String(), "use of closed network connection") {
			found = true
			return false
		}
		return true
	})
	return found
}
