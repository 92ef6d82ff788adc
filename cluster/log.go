package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"

	"github.com/hashicorp/go-hclog"
)

// newRaftLogger sends raft's hclog lines (and raft-wal's, in a migration) through the
// node's slog logger, so that one --log-level and --log-format govern every
// line the daemon prints. hclog writes JSON lines to slogWriter, which
// turns each into one slog record with its fields as attributes.
func newRaftLogger(log *slog.Logger, name string) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:       name,
		Level:      hclog.Debug,
		JSONFormat: true,
		Output:     &slogWriter{log: log},
		// hclog's own time is dropped: slog stamps the record.
		DisableTime: true,
	})
}

type slogWriter struct {
	log *slog.Logger
	mu  sync.Mutex
	buf []byte
}

// Write takes whole or partial lines; each complete line is one record.
func (w *slogWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.emit(w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 64<<10 { // a line that never ends: emit what there is
		w.emit(w.buf)
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

func (w *slogWriter) emit(line []byte) {
	if len(bytes.TrimSpace(line)) == 0 {
		return
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		w.log.Info(string(line))
		return
	}
	level := slog.LevelInfo
	switch m["@level"] {
	case "trace", "debug":
		level = slog.LevelDebug
	case "warn":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	}
	msg, _ := m["@message"].(string)
	attrs := make([]slog.Attr, 0, len(m))
	for k, v := range m {
		switch k {
		case "@level", "@message", "@timestamp":
			continue
		case "@module":
			k = "module"
		}
		attrs = append(attrs, slog.Any(k, v))
	}
	w.log.LogAttrs(context.Background(), level, msg, attrs...)
}
