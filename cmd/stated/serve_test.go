package main

import (
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/api"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
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

// validServeFlags are flags that pass validation, as the command's
// defaults are, with the data dir in a temporary directory.
func validServeFlags(t *testing.T) serveFlags {
	t.Helper()
	return serveFlags{dataDir: t.TempDir(), heapSnapshotCap: "5MiB", maxValueSize: "4MiB", maxMessageSize: "16MiB", lsmCacheSize: "1MiB", lsmCacheBytes: "256MiB",
		maxMemoryState: "1GiB", retain: 3, cache: cacheFlags{bytes: defaultCacheBytes}, maxInstances: daemon.DefaultMaxInstances,
		maxStreams: 2, queueDepth: 7, maxConnStreams: 50, firstBatchTimeout: 3 * time.Second, sweepInterval: time.Minute,
		logLevel: "info", logFormat: "text", materialize: time.Minute, materializeFails: 3, changelogDelay: 10 * time.Millisecond,
		changelogSize: "10MiB", changelogInFlight: "100MiB", packFileBytes: "4MiB"}
}

func TestServeFlagValidation(t *testing.T) {
	f := validServeFlags(t)
	f.listen = "127.0.0.1:1"
	if _, err := f.nodeOptions(slog.Default()); err == nil || !strings.Contains(err.Error(), "--listen needs --token") {
		t.Fatalf("TCP without token: %v", err)
	}
	f.listen, f.token = ":7000", "t"
	if _, err := f.nodeOptions(slog.Default()); err == nil || !strings.Contains(err.Error(), `--listen ":7000" is not a loopback address`) ||
		!strings.Contains(err.Error(), "--tls-cert and --tls-key, or --allow-plaintext-token") {
		t.Fatalf("token in the clear on every interface: %v", err)
	}
	f.plaintextToken = true
	if _, err := f.nodeOptions(slog.Default()); err != nil {
		t.Fatalf("--allow-plaintext-token: %v", err)
	}
	f.tlsCert = "cert.pem"
	if _, err := f.nodeOptions(slog.Default()); err == nil || !strings.Contains(err.Error(), "--tls-cert and --tls-key go together") {
		t.Fatalf("--tls-cert alone: %v", err)
	}
	f = validServeFlags(t)
	f.listen = "127.0.0.1:1"
	f.token, f.maxValueSize = "t", "12MiB"
	if _, err := f.nodeOptions(slog.Default()); err == nil || !strings.Contains(err.Error(), "--max-value-size 12582912 must be at most half of --max-message-size") {
		t.Fatalf("value size over half the message size: %v", err)
	}
	f = validServeFlags(t)
	f.maxMessageSize, f.maxValueSize, f.maxMemoryState, f.shutdownGrace = "3GiB", "0", "0", -time.Second
	_, err := f.nodeOptions(slog.Default())
	if err == nil || !strings.Contains(err.Error(), "--shutdown-grace is negative") {
		t.Fatalf("negative --shutdown-grace: %v", err)
	}
	f.shutdownGrace = 0
	ok := validServeFlags(t)
	o, err := ok.nodeOptions(slog.Default())
	if err != nil || o.ShutdownGrace != -1 || !strings.HasPrefix(o.CheckpointStore, "file:///") {
		t.Fatalf("defaults: %+v %v", o, err)
	}
	_, err = f.nodeOptions(slog.Default())
	for _, want := range []string{"--max-message-size 3221225472 must be below 2GiB", "--max-value-size 0 must be at least 1",
		"--max-memory-state 0 must be at least 1"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("want %q in %v", want, err)
		}
	}
	if err != nil && strings.Contains(err.Error(), "node:") {
		t.Errorf("a problem named by its field, not its flag: %v", err)
	}
}

// TestServeRefusesMemStoreAndLongTimeout: "serve --checkpoint-store mem://"
// was accepted silently (checkpoints that vanish with the process), and a
// checkpoint timeout reaching the gc grace failed in the daemon naming
// neither flag; both are refused naming the flags to change.
func TestServeRefusesMemStoreAndLongTimeout(t *testing.T) {
	for _, fl := range []string{"checkpoint-store", "changelog-store"} {
		f := validServeFlags(t)
		if fl == "checkpoint-store" {
			f.checkpointStore = "mem://"
		} else {
			f.changelogStore = "mem://"
		}
		want := "--" + fl + " mem://: an in-memory store is for tests only"
		if _, err := f.nodeOptions(slog.Default()); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s mem://: %v, want %q", fl, err, want)
		}
	}
	cases := []struct {
		timeout, grace time.Duration
		want           string
	}{
		{2 * time.Hour, 0, "--checkpoint-timeout 2h0m0s must be shorter than --gc-grace 1h0m0s"},
		{0, 5 * time.Minute, "--checkpoint-timeout 10m0s must be shorter than --gc-grace 5m0s"},
		{time.Hour, time.Hour, "lower --checkpoint-timeout or raise --gc-grace"},
		{time.Minute, 2 * time.Minute, ""},
	}
	for _, c := range cases {
		f := validServeFlags(t)
		f.checkpointTimeout, f.gcGrace = c.timeout, c.grace
		_, err := f.nodeOptions(slog.Default())
		switch {
		case c.want == "" && err != nil:
			t.Errorf("timeout %s grace %s: %v", c.timeout, c.grace, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("timeout %s grace %s: %v, want %q", c.timeout, c.grace, err, c.want)
		}
	}
}

// TestServeLimitFlags: the stream and queue limits are flags with
// STATED_* variables, defaulting to the api and daemon defaults, and reach
// the server's options; values below 1 are refused.
func TestServeLimitFlags(t *testing.T) {
	cmd := newServeCmd()
	get := func(name string) string { return cmd.Flags().Lookup(name).Value.String() }
	for name, want := range map[string]string{"queue-depth": "4", "max-streams-per-instance": "4",
		"max-concurrent-streams": "1024", "first-batch-timeout": "10s", "read-parallelism": "0"} {
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
	t.Setenv("STATED_READ_PARALLELISM", "3")
	if err := cmd.Flags().Parse([]string{"--queue-depth", "7"}); err != nil {
		t.Fatal(err)
	}
	if err := flagsFromEnv(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"queue-depth": "7", "max-streams-per-instance": "2",
		"max-concurrent-streams": "50", "first-batch-timeout": "3s", "read-parallelism": "3"} {
		if got := get(name); got != want {
			t.Errorf("--%s = %s, want %s", name, got, want)
		}
	}

	f := validServeFlags(t)
	f.readParallelism = 3
	o, err := f.nodeOptions(slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if o.ReadParallelism != 3 {
		t.Fatalf("--read-parallelism 3 reached node as %d", o.ReadParallelism)
	}
	if o.MaxMemoryState != 1<<30 {
		t.Fatalf("--max-memory-state 1GiB parsed as %d", o.MaxMemoryState)
	}
	if o.QueueDepth != 7 || o.MaxStreamsPerInstance != 2 || o.MaxConcurrentStreams != 50 || o.FirstBatchTimeout != 3*time.Second ||
		o.MaxMessageSize != 16<<20 {
		t.Fatalf("node options %+v", o)
	}
	f.queueDepth, f.maxStreams, f.maxConnStreams, f.firstBatchTimeout, f.readParallelism = 0, -1, 0, 0, -1
	_, err = f.nodeOptions(slog.Default())
	for _, want := range []string{"--queue-depth", "--max-streams-per-instance", "--max-concurrent-streams", "--first-batch-timeout", "--read-parallelism"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("invalid %s: %v", want, err)
		}
	}
}

// TestFlagOfCoversOptions: every node.Options field (and S3 setting) is
// either set by a flag of "stated serve", named in flagOf, or has no
// flag; and flagOf names only real fields and flags. A field added to
// node.Options without a decision here fails it, so that node's problems
// are never reported to a CLI user under a Go field name.
func TestFlagOfCoversOptions(t *testing.T) {
	noFlag := map[string]bool{"Listener": true, "NoSocket": true, "Store": true, "Logger": true, "GRPCOptions": true, "WrapOpener": true, "S3": true, "LogStore": true, "TuneCluster": true, "Fence": true,
		"S3.S3": true, "S3.CacheDir": true, "S3.CacheBytes": true, "S3.Uncached": true, "S3.Wrap": true}
	fields := map[string]bool{}
	// nested are the fields of S3.S3 (s3store.Options): most have no flag,
	// and flagOf may name the few that do.
	nested := map[string]bool{}
	var walk func(prefix string, typ reflect.Type)
	walk = func(prefix string, typ reflect.Type) {
		for i := 0; i < typ.NumField(); i++ {
			sf := typ.Field(i)
			name := prefix + sf.Name
			if strings.HasPrefix(name, "S3.S3.") {
				nested[name] = true
				continue
			}
			fields[name] = true
			if name == "S3" || name == "S3.S3" {
				walk(name+".", sf.Type)
			}
		}
	}
	walk("", reflect.TypeOf(host.Options{}))
	for name := range fields {
		if _, ok := flagOf[name]; ok == noFlag[name] {
			t.Errorf("node.Options field %s: in flagOf %v, without a flag %v; want exactly one", name, ok, noFlag[name])
		}
	}
	cmd := newServeCmd()
	for field, flag := range flagOf {
		if !fields[field] && !nested[field] {
			t.Errorf("flagOf names %s, not a field of node.Options", field)
		}
		if cmd.Flags().Lookup(flag) == nil {
			t.Errorf("flagOf names --%s, not a flag of stated serve", flag)
		}
	}
}

// TestFlagDefaultsAreNodeDefaults: every flag of "stated serve" that sets
// a numeric or duration field of node.Options defaults to the value the
// node itself fills in (EnsureDefaults), so a default has one value
// whether a node is run by the CLI or built in Go.
func TestFlagDefaultsAreNodeDefaults(t *testing.T) {
	var o host.Options
	o.EnsureDefaults()
	v := reflect.ValueOf(o)
	fl := newServeCmd().Flags()
	checked := 0
	for field, flag := range flagOf {
		if strings.Contains(field, ".") {
			continue
		}
		fv := v.FieldByName(field)
		def := fl.Lookup(flag).DefValue
		var got, want int64
		switch fv.Interface().(type) {
		case time.Duration:
			d, err := time.ParseDuration(def)
			if err != nil {
				t.Fatalf("--%s default %q: %v", flag, def, err)
			}
			got, want = int64(d), fv.Int()
		case int, int64:
			n, err := parseSize(def)
			if err != nil {
				t.Fatalf("--%s default %q: %v", flag, def, err)
			}
			got, want = n, fv.Int()
		default:
			continue
		}
		checked++
		if got != want {
			t.Errorf("--%s defaults to %q (%d), node.Options.%s to %d", flag, def, got, field, want)
		}
	}
	if checked < 15 {
		t.Fatalf("only %d numeric flags checked", checked)
	}
}

// TestServeLSMRemoteFlags: --lsm-remote and --lsm-cache-bytes (or their
// STATED_* variables) reach node.Options; a bad size names its flag.
func TestServeLSMRemoteFlags(t *testing.T) {
	cmd := newServeCmd()
	get := func(name string) string { return cmd.Flags().Lookup(name).Value.String() }
	if get("lsm-remote") != "false" || get("lsm-cache-bytes") != "256MiB" {
		t.Fatalf("defaults: --lsm-remote %s --lsm-cache-bytes %s", get("lsm-remote"), get("lsm-cache-bytes"))
	}
	t.Setenv("STATED_LSM_REMOTE", "true")
	t.Setenv("STATED_LSM_CACHE_BYTES", "64MiB")
	t.Setenv("STATED_LSM_MEMTABLE_BYTES", "32MiB")
	if err := flagsFromEnv(cmd.Flags()); err != nil {
		t.Fatal(err)
	}
	f := validServeFlags(t)
	f.lsmRemote, f.lsmCacheBytes, f.lsmMemTable = get("lsm-remote") == "true", get("lsm-cache-bytes"), get("lsm-memtable-bytes")
	o, err := f.nodeOptions(slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if !o.LSMRemote || o.LSMRemoteCacheBytes != 64<<20 || o.LSMMemTableBytes != 32<<20 {
		t.Fatalf("node options: LSMRemote %v, LSMRemoteCacheBytes %d, LSMMemTableBytes %d", o.LSMRemote, o.LSMRemoteCacheBytes, o.LSMMemTableBytes)
	}
	f.lsmMemTable = "1KiB"
	if _, err := f.nodeOptions(slog.Default()); err == nil || !strings.Contains(err.Error(), "--lsm-memtable-bytes") {
		t.Fatalf("a 1 KiB --lsm-memtable-bytes: %v", err)
	}
	f.lsmMemTable = "0"
	f.lsmCacheBytes = "lots"
	if _, err := f.nodeOptions(slog.Default()); err == nil || !strings.Contains(err.Error(), "--lsm-cache-bytes") {
		t.Fatalf("bad --lsm-cache-bytes: %v", err)
	}
}
