package main

import (
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/api"
	"github.com/statedhq/stated/daemon"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "4096": 4096, "4KiB": 4096, "4K": 4096, "5MiB": 5 << 20, "2GB": 2e9, "1 MiB": 1 << 20, "7B": 7} {
		got, err := parseSize(in)
		if err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "x", "1.5MiB", "9999999999GiB", "MiB"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) accepted", in)
		}
	}
}

func TestServeFlagsFromEnv(t *testing.T) {
	cmd := newServeCmd()
	t.Setenv("STATED_DATA_DIR", "from-env")
	t.Setenv("STATED_RETAIN", "7")
	t.Setenv("STATED_SOCKET", "env.sock")
	if err := cmd.Flags().Parse([]string{"--socket", "flag.sock"}); err != nil {
		t.Fatal(err)
	}
	if err := flagsFromEnv(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	get := func(name string) string { return cmd.Flags().Lookup(name).Value.String() }
	if get("data-dir") != "from-env" || get("retain") != "7" || get("socket") != "flag.sock" {
		t.Fatalf("data-dir %q retain %q socket %q", get("data-dir"), get("retain"), get("socket"))
	}
	t.Setenv("STATED_RETAIN", "many")
	cmd = newServeCmd()
	if err := flagsFromEnv(cmd.Flags()); err == nil || !strings.Contains(err.Error(), "STATED_RETAIN") {
		t.Fatalf("bad env value: %v", err)
	}
}

func TestServeFlagValidation(t *testing.T) {
	f := serveFlags{heapSnapshotCap: "5MiB", maxValueSize: "4MiB", maxMessageSize: "16MiB", lsmCacheSize: "1MiB", maxMemoryState: "1GiB", retain: 3, listen: "127.0.0.1:1"}
	if _, err := f.validate(); err == nil || !strings.Contains(err.Error(), "--token") {
		t.Fatalf("TCP without token: %v", err)
	}
	f.token, f.maxValueSize = "t", "12MiB"
	if _, err := f.validate(); err == nil || !strings.Contains(err.Error(), "half") {
		t.Fatalf("value size over half the message size: %v", err)
	}
}

// TestServeLimitFlags: the stream and queue limits are flags with
// STATED_* variables, defaulting to the api and daemon defaults, and reach
// the server's options; values below 1 are refused.
func TestServeLimitFlags(t *testing.T) {
	cmd := newServeCmd()
	get := func(name string) string { return cmd.Flags().Lookup(name).Value.String() }
	for name, want := range map[string]string{"queue-depth": "4", "max-streams-per-instance": "4",
		"max-concurrent-streams": "1024", "first-batch-timeout": "10s"} {
		if got := get(name); got != want {
			t.Errorf("--%s defaults to %s, want %s", name, got, want)
		}
	}
	if api.DefaultQueueDepth != 4 || daemon.DefaultMaxStreamsPerInstance != 4 || api.DefaultMaxConcurrentStreams != 1024 ||
		api.DefaultFirstBatchTimeout != 10*time.Second {
		t.Fatal("defaults changed: update this test")
	}
	t.Setenv("STATED_QUEUE_DEPTH", "9")
	t.Setenv("STATED_MAX_STREAMS_PER_INSTANCE", "2")
	t.Setenv("STATED_MAX_CONCURRENT_STREAMS", "50")
	t.Setenv("STATED_FIRST_BATCH_TIMEOUT", "3s")
	if err := cmd.Flags().Parse([]string{"--queue-depth", "7"}); err != nil {
		t.Fatal(err)
	}
	if err := flagsFromEnv(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"queue-depth": "7", "max-streams-per-instance": "2",
		"max-concurrent-streams": "50", "first-batch-timeout": "3s"} {
		if got := get(name); got != want {
			t.Errorf("--%s = %s, want %s", name, got, want)
		}
	}

	f := serveFlags{heapSnapshotCap: "5MiB", maxValueSize: "4MiB", maxMessageSize: "16MiB", lsmCacheSize: "1MiB", maxMemoryState: "1GiB", retain: 3,
		cache: cacheFlags{bytes: defaultCacheBytes}, maxStreams: 2, queueDepth: 7, maxConnStreams: 50, firstBatchTimeout: 3 * time.Second}
	sz, err := f.validate()
	if err != nil {
		t.Fatal(err)
	}
	if sz.maxMemory != 1<<30 {
		t.Fatalf("--max-memory-state 1GiB parsed as %d", sz.maxMemory)
	}
	o := f.serverOptions(sz, nil)
	if o.QueueDepth != 7 || o.MaxConcurrentStreams != 50 || o.FirstBatchTimeout != 3*time.Second || o.MaxMessageSize != 16<<20 {
		t.Fatalf("server options %+v", o)
	}
	f.queueDepth, f.maxStreams, f.maxConnStreams, f.firstBatchTimeout = 0, -1, 0, 0
	_, err = f.validate()
	for _, want := range []string{"--queue-depth", "--max-streams-per-instance", "--max-concurrent-streams", "--first-batch-timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("invalid %s: %v", want, err)
		}
	}
}
