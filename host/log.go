package host

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/aws/smithy-go/logging"
)

// SDKLogger returns a logger for the AWS SDK (config.WithLogger) that
// writes to l with the attribute component=aws: its warnings at level
// warn, its debug lines (the retries Options.S3 asks for) at level debug.
func SDKLogger(l *slog.Logger) logging.Logger { return sdkLogger{l} }

type sdkLogger struct{ l *slog.Logger }

// Logf implements logging.Logger.
func (s sdkLogger) Logf(c logging.Classification, format string, args ...any) {
	level := slog.LevelWarn
	if c == logging.Debug {
		level = slog.LevelDebug
	}
	if !s.l.Enabled(context.Background(), level) {
		return
	}
	s.l.Log(context.Background(), level, fmt.Sprintf(format, args...), "component", "aws")
}
