package storeurl_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cache"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/s3store"
	"github.com/statedhq/stated/tiered/s3store/s3test"
	"github.com/statedhq/stated/tiered/storeurl"
)

func TestParse(t *testing.T) {
	ok := map[string]storeurl.Location{
		"file:///var/lib/x":          {Scheme: "file", Path: "/var/lib/x"},
		"file://localhost/var/lib/x": {Scheme: "file", Path: "/var/lib/x"},
		"file:rel/dir":               {Scheme: "file", Path: "rel/dir"},
		"rel/dir":                    {Scheme: "file", Path: "rel/dir"},
		"/abs/dir":                   {Scheme: "file", Path: "/abs/dir"},
		"s3://bucket":                {Scheme: "s3", Bucket: "bucket"},
		"s3://bucket/":               {Scheme: "s3", Bucket: "bucket"},
		"s3://bucket/a/b/":           {Scheme: "s3", Bucket: "bucket", Prefix: "a/b"},
		"s3://b/p?region=eu-west-1":  {Scheme: "s3", Bucket: "b", Prefix: "p"},
		"mem://":                     {Scheme: "mem"},
	}
	for raw, want := range ok {
		got, err := storeurl.Parse(raw)
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		if got.Scheme != want.Scheme || got.Path != want.Path || got.Bucket != want.Bucket || got.Prefix != want.Prefix {
			t.Errorf("%s: %+v, want %+v", raw, got, want)
		}
	}
	bad := map[string]string{
		"":                            "empty",
		"ftp://x/y":                   "unknown scheme",
		"s3:///prefix":                "no bucket",
		"s3://key:secret@bucket/p":    "credentials",
		"s3://b/p?secret=x":           "unknown parameter",
		"s3://b/a/../b":               "prefix",
		"file://host/x":               "no host",
		"file:///x?endpoint=y":        "no query",
		"s3://b/p?path-style=perhaps": "", // caught when resolving
	}
	for raw, want := range bad {
		_, err := storeurl.Parse(raw)
		if want == "" {
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) || !strings.HasPrefix(err.Error(), "storeurl: ") {
			t.Errorf("%q: %v, want an error mentioning %q", raw, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "secret@") {
			t.Errorf("%q: error leaks the secret: %v", raw, err)
		}
	}
}

func TestS3OptionsPrecedence(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	t.Setenv("AWS_ENDPOINT_URL", "http://env:1")
	t.Setenv("AWS_REGION", "env-region")
	t.Setenv("AWS_ACCESS_KEY_ID", "envkey")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "envsecret")
	loc, _ := storeurl.Parse("s3://b/p?region=url-region")
	o, err := loc.S3Options(storeurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if o.Endpoint != "http://env:1" || o.Region != "url-region" || o.AccessKeyID != "envkey" || o.SecretAccessKey != "envsecret" || !o.PathStyle {
		t.Fatalf("env and URL: %+v", o)
	}
	o, _ = loc.S3Options(storeurl.Options{Endpoint: "http://flag:2", Region: "flag-region", AccessKeyID: "k", SecretAccessKey: "s", Addressing: storeurl.AddressingVirtual})
	if o.Endpoint != "http://flag:2" || o.Region != "flag-region" || o.AccessKeyID != "k" || o.PathStyle {
		t.Fatalf("flags: %+v", o)
	}
	t.Setenv("AWS_ENDPOINT_URL", "")
	loc, _ = storeurl.Parse("s3://b")
	if o, _ := loc.S3Options(storeurl.Options{}); o.PathStyle {
		t.Fatal("AWS without an endpoint must default to virtual-host style")
	}
	loc, _ = storeurl.Parse("s3://b?path-style=true")
	if o, _ := loc.S3Options(storeurl.Options{}); !o.PathStyle {
		t.Fatal("path-style=true ignored")
	}
	loc, _ = storeurl.Parse("s3://b?path-style=perhaps")
	if _, err := loc.S3Options(storeurl.Options{}); err == nil {
		t.Fatal("path-style=perhaps accepted")
	}
}

func TestOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := storeurl.Open(ctx, "file://"+dir, storeurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s.(*localfs.Store); !ok {
		t.Fatalf("file URL opened %T", s)
	}
	tiered.PutBytes(ctx, s, "x", []byte("x"))
	s.Close()
	s, err = storeurl.Open(ctx, filepath.Join(dir), storeurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := tiered.ReadAll(ctx, s, "x", 0); err != nil || string(b) != "x" {
		t.Fatalf("plain path: %q %v", b, err)
	}
	s.Close()
	s, err = storeurl.Open(ctx, "mem://", storeurl.Options{CacheDir: t.TempDir(), CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	c, ok := s.(*cache.Store)
	if !ok {
		t.Fatalf("cached mem URL opened %T", s)
	}
	if _, ok := c.Remote().(*memstore.Store); !ok {
		t.Fatalf("cache over %T", c.Remote())
	}
	s.Close()
}

func TestOpenS3(t *testing.T) {
	ctx := context.Background()
	so, _ := s3test.Options(t)
	url := "s3://" + so.Bucket + "/" + strings.Trim(so.Prefix+"/ckpt", "/") + "?path-style=true"
	s, err := storeurl.Open(ctx, url, storeurl.Options{
		Endpoint: so.Endpoint, Region: so.Region, AccessKeyID: so.AccessKeyID, SecretAccessKey: so.SecretAccessKey,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := tiered.PutBytes(ctx, s, "job/chk-1/_metadata", []byte("m")); err != nil {
		t.Fatal(err)
	}
	// The object sits under the URL's prefix in the bucket.
	so.Prefix = strings.Trim(so.Prefix+"/ckpt", "/")
	raw, err := s3store.Open(ctx, so)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if b, err := tiered.ReadAll(ctx, raw, "job/chk-1/_metadata", 0); err != nil || string(b) != "m" {
		t.Fatalf("object under the prefix: %q %v", b, err)
	}
	// Env fallback gives the same store.
	t.Setenv("AWS_ENDPOINT_URL", so.Endpoint)
	t.Setenv("AWS_ACCESS_KEY_ID", so.AccessKeyID)
	t.Setenv("AWS_SECRET_ACCESS_KEY", so.SecretAccessKey)
	t.Setenv("AWS_REGION", "us-east-1")
	s2, err := storeurl.Open(ctx, url, storeurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if b, err := tiered.ReadAll(ctx, s2, "job/chk-1/_metadata", 0); err != nil || string(b) != "m" {
		t.Fatalf("through env settings: %q %v", b, err)
	}
	if _, err := storeurl.Open(ctx, "s3://"+so.Bucket+"-missing", storeurl.Options{}); err == nil {
		t.Fatal("missing bucket opened")
	}
}
