package cluster

import (
	"context"
	"log/slog"
	"strings"
)

// quietClosed is the node's log handler: a record whose error says the
// connection was already closed ("use of closed network connection", or
// raft's "transport shutdown") is lowered to debug. raft's transport logs one at level error for every
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
	// A heartbeat or an append that met EOF: the peer closed the
	// connection, as every member does when it stops (a rolling stop
	// closes followers first, and the leader may be mid-append to one).
	// Not this node's fault, but a peer that went away is worth a
	// warning; cluster status and the metrics say whether it came back.
	if r.Level > slog.LevelWarn && toPeer(r.Message) && errorIs(r, "EOF") {
		r.Level = slog.LevelWarn
	}
	return q.h.Handle(ctx, r)
}

// toPeer reports whether msg is raft's record of a failed request to a
// peer: a heartbeat or an append of entries.
func toPeer(msg string) bool {
	return strings.HasPrefix(msg, "failed to heartbeat") || strings.HasPrefix(msg, "failed to appendEntries")
}

// errorIs reports whether r's error attribute is exactly text.
func errorIs(r slog.Record, text string) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "error" && a.Value.String() == text {
			found = true
			return false
		}
		return true
	})
	return found
}

func (q quietClosed) WithAttrs(as []slog.Attr) slog.Handler { return quietClosed{q.h.WithAttrs(as)} }
func (q quietClosed) WithGroup(name string) slog.Handler    { return quietClosed{q.h.WithGroup(name)} }

// closedConn reports whether r's error attribute says a connection this
// process closed was used.
func closedConn(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		// "transport shutdown" is raft's ErrTransportShutdown: this node's
		// own transport was closed under a connection handler.
		if a.Key == "error" && (strings.Contains(a.Value.String(), "use of closed network connection") ||
			a.Value.String() == "transport shutdown") {
			found = true
			return false
		}
		return true
	})
	return found
}
