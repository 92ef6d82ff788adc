package main

import (
	"strings"
	"testing"
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
	f := serveFlags{heapSnapshotCap: "5MiB", maxValueSize: "4MiB", maxMessageSize: "16MiB", lsmCacheSize: "1MiB", retain: 3, listen: "127.0.0.1:1"}
	if _, err := f.validate(); err == nil || !strings.Contains(err.Error(), "--token") {
		t.Fatalf("TCP without token: %v", err)
	}
	f.token, f.maxValueSize = "t", "12MiB"
	if _, err := f.validate(); err == nil || !strings.Contains(err.Error(), "half") {
		t.Fatalf("value size over half the message size: %v", err)
	}
}
