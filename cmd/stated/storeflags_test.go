package main

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/statedhq/stated/tiered/storeurl"
)

// TestS3FlagsEveryCommand: serve, checkpoints, verify and gc take the S3
// flags, read STATED_S3_* for the ones not given, and turn them into
// storeurl options.
func TestS3FlagsEveryCommand(t *testing.T) {
	t.Setenv("STATED_S3_REGION", "env-region")
	t.Setenv("STATED_S3_SECRET_ACCESS_KEY", "env-secret")
	t.Setenv("STATED_S3_ENDPOINT", "http://env:1")
	args := []string{"--s3-endpoint", "http://flag:2", "--s3-path-style", "--s3-access-key-id", "flag-key"}
	want := storeurl.Options{Endpoint: "http://flag:2", Region: "env-region", AccessKeyID: "flag-key",
		SecretAccessKey: "env-secret", Addressing: storeurl.AddressingPath}
	check := func(name string, got storeurl.Options) {
		t.Helper()
		if got.Endpoint != want.Endpoint || got.Region != want.Region || got.AccessKeyID != want.AccessKeyID ||
			got.SecretAccessKey != want.SecretAccessKey || got.Addressing != want.Addressing {
			t.Errorf("%s: options %+v, want %+v", name, got, want)
		}
	}

	cmds := map[string]*cobra.Command{"serve": newServeCmd(), "checkpoints": newCheckpointsCmd(), "verify": newVerifyCmd(), "gc": newGCCmd()}
	for name, cmd := range cmds {
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := cmd.PreRunE(cmd, nil); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		f := parsedS3Flags(t, cmd.Flags())
		check(name, f.options())
	}
}

// parsedS3Flags reads the S3 flags of fs back from their values.
func parsedS3Flags(t *testing.T, fs *pflag.FlagSet) s3Flags {
	t.Helper()
	get := func(n string) string {
		f := fs.Lookup(n)
		if f == nil {
			t.Fatalf("no --%s", n)
		}
		return f.Value.String()
	}
	f := s3Flags{endpoint: get("s3-endpoint"), region: get("s3-region"),
		accessKeyID: get("s3-access-key-id"), secretAccessKey: get("s3-secret-access-key")}
	if v := get("s3-path-style"); v != "" {
		if err := f.pathStyle.Set(v); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func TestS3FlagsPathStyleAndValidation(t *testing.T) {
	var f s3Flags
	if o := f.options(); o.Addressing != storeurl.AddressingAuto {
		t.Fatalf("unset --s3-path-style: %q", o.Addressing)
	}
	if err := f.pathStyle.Set("false"); err != nil {
		t.Fatal(err)
	}
	if o := f.options(); o.Addressing != storeurl.AddressingVirtual {
		t.Fatalf("--s3-path-style=false: %q", o.Addressing)
	}
	if err := f.pathStyle.Set("maybe"); err == nil {
		t.Fatal("--s3-path-style=maybe accepted")
	}
	f = s3Flags{endpoint: "127.0.0.1:7070", accessKeyID: "k"}
	err := f.validate()
	if err == nil || !strings.Contains(err.Error(), "--s3-endpoint") || !strings.Contains(err.Error(), "go together") {
		t.Fatalf("bad endpoint and a key without its secret: %v", err)
	}
	f = s3Flags{endpoint: "https://s3.example.com", accessKeyID: "k", secretAccessKey: "s"}
	if err := f.validate(); err != nil {
		t.Fatal(err)
	}
	// The CLI commands refuse bad S3 settings from the environment too.
	t.Setenv("STATED_S3_ACCESS_KEY_ID", "only-the-key")
	cmd := newCheckpointsCmd()
	if err := cmd.ParseFlags(nil); err != nil {
		t.Fatal(err)
	}
	if err := cmd.PreRunE(cmd, nil); err == nil || !strings.Contains(err.Error(), "go together") {
		t.Fatalf("key id without secret from the environment: %v", err)
	}
}

// TestCacheFlags: the cache flags reach the node's options (--cache-bytes
// 0 turns the cache off), and the node's rules on the cache directory are
// reported under the flags' names. node's TestCacheResolve covers the
// defaults by scheme.
func TestCacheFlags(t *testing.T) {
	other := t.TempDir()
	cases := []struct {
		dir, bytes, store string
		wantDir           string
		wantBytes         int64
		err               string
	}{
		{"", defaultCacheBytes, "s3://b/p", "", 1 << 30, ""},
		{other, "64MiB", "s3://b/p", other, 64 << 20, ""},
		{"", "0", "s3://b/p", "", -1, ""},
		{other, "0", "s3://b/p", "", 0, "--cache-dir " + other + " is set, but --cache-bytes"},
		{"", "lots", "s3://b/p", "", 0, "--cache-bytes"},
		{".", defaultCacheBytes, "s3://b/p", "", 0, "must not be --data-dir"},
		{"instances/c", defaultCacheBytes, "s3://b/p", "", 0, "instances"},
		{filepath.Join(other, "ckpt", "cache"), defaultCacheBytes, "file://" + filepath.Join(other, "ckpt"), "", 0, "overlaps the checkpoint store"},
	}
	for _, c := range cases {
		f := validServeFlags(t)
		f.cache, f.checkpointStore = cacheFlags{dir: c.dir, bytes: c.bytes}, c.store
		if c.dir == "." || strings.HasPrefix(c.dir, "instances") {
			f.cache.dir = filepath.Join(f.dataDir, c.dir)
		}
		o, err := f.nodeOptions(slog.Default())
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: %v, want an error mentioning %q", c, err, c.err)
			}
			continue
		}
		if err != nil || o.CacheDir != c.wantDir || o.CacheBytes != c.wantBytes {
			t.Errorf("%+v: cache dir %q bytes %d %v", c, o.CacheDir, o.CacheBytes, err)
		}
	}
}
