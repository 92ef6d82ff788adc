package host

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestCacheResolve: the cache's defaults by store scheme and the
// directories it must not share.
func TestCacheResolve(t *testing.T) {
	data := t.TempDir()
	other := t.TempDir()
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	type want struct {
		dir   string
		bytes int64
	}
	cases := []struct {
		dir   string
		bytes int64
		store string
		want  want
		err   string
	}{
		// s3: on by default, under the data dir.
		{"", 1 << 30, "s3://b/p", want{abs(filepath.Join(data, "cache")), 1 << 30}, ""},
		{other, 64 << 20, "s3://b/p", want{other, 64 << 20}, ""},
		{"", -1, "s3://b/p", want{}, ""},
		// Local stores: off unless asked for.
		{"", 1 << 30, "file://" + filepath.Join(data, "checkpoints"), want{}, ""},
		{other, 1 << 30, "file:///mnt/nfs/ckpt", want{other, 1 << 30}, ""},
		{other, -1, "s3://b/p", want{}, "CacheDir " + other + " is set, but CacheBytes"},
		{data, 1 << 30, "s3://b/p", want{}, "must not be DataDir"},
		{filepath.Dir(data), 1 << 30, "s3://b/p", want{}, "must not be DataDir"},
		{filepath.Join(data, "instances", "c"), 1 << 30, "s3://b/p", want{}, "instances"},
		{filepath.Join(other, "ckpt", "cache"), 1 << 30, "file://" + filepath.Join(other, "ckpt"), want{}, "overlaps the checkpoint store"},
	}
	for _, c := range cases {
		o := Options{DataDir: data, CheckpointStore: c.store, CacheDir: c.dir, CacheBytes: c.bytes}
		dir, bytes, err := o.cache()
		if c.err != "" {
			var oe *OptionError
			if err == nil || !strings.Contains(err.Error(), c.err) || !errors.As(err, &oe) || oe.Field != "CacheDir" {
				t.Errorf("%+v: %v, want a CacheDir problem mentioning %q", c, err, c.err)
			}
			continue
		}
		if err != nil || (want{dir, bytes}) != c.want {
			t.Errorf("%+v: %s %d %v, want %+v", c, dir, bytes, err, c.want)
		}
	}
}

// TestOptionErrorText: a problem names every field it involves through
// the caller's names, and its Field is the field at fault.
func TestOptionErrorText(t *testing.T) {
	o := Options{DataDir: t.TempDir(), MaxValueSize: 12 << 20, Listen: "127.0.0.1:1"}
	o.EnsureDefaults()
	var found []*OptionError
	for _, err := range o.Validate().(interface{ Unwrap() []error }).Unwrap() {
		var oe *OptionError
		if !errors.As(err, &oe) {
			t.Fatalf("%v is not an *OptionError", err)
		}
		found = append(found, oe)
	}
	upper := func(f string) string { return "<" + strings.ToUpper(f) + ">" }
	want := map[string]string{
		"MaxValueSize": "<MAXVALUESIZE> 12582912 must be at most half of <MAXMESSAGESIZE> 16777216",
		"Listen":       "<LISTEN> needs <TOKEN> or <TLSCLIENTCA>: TCP clients are not protected by the socket's file mode",
	}
	if len(found) != len(want) {
		t.Fatalf("problems %v, want %d", found, len(want))
	}
	for _, oe := range found {
		if got := oe.Text(upper); got != want[oe.Field] {
			t.Errorf("%s: Text %q, want %q", oe.Field, got, want[oe.Field])
		}
		if !strings.HasPrefix(oe.Error(), "node: "+oe.Field+" ") {
			t.Errorf("Error %q does not start with its field", oe.Error())
		}
	}
}

// TestExternalDirOutsideTheStore: an external directory inside a file
// checkpoint store is refused (the catalog's sweep would delete the
// engine's files), as is a relative one; beside it is fine. So for an S3
// prefix against an S3 checkpoint store, either way round.
func TestExternalDirOutsideTheStore(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		ext  string
		says string
	}{
		{filepath.Join(dir, "chk", "flink"), "inside the checkpoint store"},
		{filepath.Join(dir, "chk"), "inside the checkpoint store"},
		{"rel/dir", "not an absolute path"},
		{filepath.Join(dir, "chk-ext"), ""},
		{"s3://b/chk/flink", "overlaps the checkpoint store"},
		{"s3://b", "overlaps the checkpoint store"},
		{"s3://b/chk-ext?endpoint=http://127.0.0.1:1&bogus=1", "unknown parameter"},
		{"mem://x", "is a mem URL"},
		{"s3://b/chk-ext?endpoint=http://127.0.0.1:1", ""},
		{"s3://other/chk", ""},
	} {
		o := Options{DataDir: filepath.Join(dir, "data"), CheckpointStore: "file://" + filepath.Join(dir, "chk"), ExternalDir: c.ext}
		if strings.HasPrefix(c.ext, "s3:") || strings.HasPrefix(c.ext, "mem:") {
			o.CheckpointStore = "s3://b/chk?endpoint=http://127.0.0.1:1"
		}
		o.EnsureDefaults()
		err := o.Validate()
		if c.says == "" {
			if err != nil {
				t.Errorf("%s: %v", c.ext, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "ExternalDir") {
			t.Errorf("%s: %v, want a problem of ExternalDir saying %q", c.ext, err, c.says)
		}
	}
}
