package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/statedhq/stated/tiered/s3store"
)

// Environment variables that point the tests at a real S3 server.
const (
	EnvEndpoint = "STATED_TEST_S3_ENDPOINT"
	EnvBucket   = "STATED_TEST_S3_BUCKET"
	// EnvRequire, when set to 1, makes RequireReal fail rather than skip:
	// scripts/test.sh sets it once it has started a server, so a CI run can
	// never pass with the real-server checks silently skipped.
	EnvRequire = "STATED_TEST_S3_REQUIRE"
)

// FakeBucket is the bucket the in-process server holds.
const FakeBucket = "stated-test"

// Real reports whether a real S3 server is configured.
func Real() bool { return os.Getenv(EnvEndpoint) != "" }

// RequireReal skips t, saying why, when no real S3 server is configured;
// it fails t instead when EnvRequire is 1.
func RequireReal(t testing.TB, why string) {
	t.Helper()
	if Real() {
		return
	}
	msg := "needs a real S3 server (set " + EnvEndpoint + "; scripts/s3-server.sh start prints it): " + why
	if os.Getenv(EnvRequire) == "1" {
		t.Fatal(msg + "; " + EnvRequire + "=1 forbids skipping")
	}
	t.Skip(msg)
}

// RealOptions returns options for the configured real server, rooted at a
// fresh prefix that is emptied when t ends. It fails t when no server or
// no bucket is configured.
func RealOptions(t testing.TB) s3store.Options {
	t.Helper()
	endpoint, bucket := os.Getenv(EnvEndpoint), os.Getenv(EnvBucket)
	if endpoint == "" || bucket == "" {
		t.Fatalf("s3test: set %s and %s to use a real S3 server", EnvEndpoint, EnvBucket)
	}
	opts := s3store.Options{
		Bucket:          bucket,
		Prefix:          "test-" + sanitize(t.Name()) + "-" + randomSuffix(),
		Endpoint:        endpoint,
		Region:          os.Getenv("AWS_REGION"),
		AccessKeyID:     os.Getenv("AWS_ACCESS_KEY_ID"),
		SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		PathStyle:       true,
	}
	t.Cleanup(func() { empty(t, opts) })
	return opts
}

// FakeOptions starts an in-process gofakes3 server with one empty bucket,
// stopped when t ends. gofakes3 accepts any credentials and does not check
// If-None-Match on multipart completion.
func FakeOptions(t testing.TB) s3store.Options {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(FakeBucket); err != nil {
		t.Fatalf("s3test: create bucket: %v", err)
	}
	srv := httptest.NewServer(gofakes3.New(backend, gofakes3.WithLogger(gofakes3.DiscardLog())).Server())
	t.Cleanup(srv.Close)
	return s3store.Options{
		Bucket:          FakeBucket,
		Endpoint:        srv.URL,
		Region:          "us-east-1",
		AccessKeyID:     "testkey",
		SecretAccessKey: "testsecret",
		PathStyle:       true,
	}
}

// Options returns RealOptions when a real server is configured, else
// FakeOptions; real says which.
func Options(t testing.TB) (opts s3store.Options, real bool) {
	if Real() {
		return RealOptions(t), true
	}
	return FakeOptions(t), false
}

// empty deletes everything under the options' prefix.
func empty(t testing.TB, opts s3store.Options) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := s3store.Open(ctx, opts)
	if err != nil {
		t.Errorf("s3test: cleanup of %s: %v", opts.Prefix, err)
		return
	}
	defer s.Close()
	for {
		page, err := s.List(ctx, "", "", 1000)
		if err != nil {
			t.Errorf("s3test: cleanup of %s: %v", opts.Prefix, err)
			return
		}
		if len(page.Objects) == 0 {
			return
		}
		names := make([]string, len(page.Objects))
		for i, o := range page.Objects {
			names[i] = o.Name
		}
		if err := s.DeleteBatch(ctx, names); err != nil {
			t.Errorf("s3test: cleanup of %s: %v", opts.Prefix, err)
			return
		}
	}
}

func sanitize(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	s := b.String()
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

func randomSuffix() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Store opens a store over Options(t), closed when t ends.
func Store(t testing.TB) *s3store.Store {
	t.Helper()
	opts, _ := Options(t)
	s, err := s3store.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
