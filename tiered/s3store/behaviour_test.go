package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/s3store"
	"github.com/statedhq/stated/tiered/s3store/s3test"
	"github.com/statedhq/stated/tiered/storetest"
)

// flakyTransport breaks response bodies and fails requests on demand.
type flakyTransport struct {
	base http.RoundTripper
	// breakBodiesAfter > 0 cuts GET bodies after that many bytes, for the
	// first breakBodies responses.
	breakBodiesAfter int64
	breakBodies      atomic.Int32
	// fail503 requests are answered 503 before reaching the server.
	fail503 atomic.Int32
	// delay is added to every request.
	delay    time.Duration
	requests atomic.Int32
}

func (f *flakyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	f.requests.Add(1)
	if f.delay > 0 {
		select {
		case <-time.After(f.delay):
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
	if f.fail503.Add(-1) >= 0 {
		if req.Body != nil {
			io.Copy(io.Discard, req.Body)
			req.Body.Close()
		}
		return &http.Response{StatusCode: 503, Status: "503 Slow Down", Header: http.Header{},
			Body: io.NopCloser(strings.NewReader("<Error><Code>SlowDown</Code></Error>")), Request: req}, nil
	}
	resp, err := f.base.RoundTrip(req)
	if err == nil && req.Method == http.MethodGet && f.breakBodiesAfter > 0 && f.breakBodies.Add(-1) >= 0 {
		resp.Body = &brokenBody{rc: resp.Body, left: f.breakBodiesAfter}
	}
	return resp, err
}

type brokenBody struct {
	rc   io.ReadCloser
	left int64
}

func (b *brokenBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errors.New("connection reset by test")
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *brokenBody) Close() error { return b.rc.Close() }

func openWith(t *testing.T, ft *flakyTransport, mod func(*s3store.Options)) *s3store.Store {
	t.Helper()
	opts, _ := s3test.Options(t)
	ft.base = http.DefaultTransport
	opts.HTTPClient = &http.Client{Transport: ft}
	opts.PartSize = s3store.MinPartSize
	opts.MaxBackoff = 10 * time.Millisecond
	if mod != nil {
		mod(&opts)
	}
	s, err := s3store.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// A GET whose connection breaks mid-body resumes where it stopped.
func TestGetResumesBrokenBody(t *testing.T) {
	ft := &flakyTransport{breakBodiesAfter: 100 << 10}
	s := openWith(t, ft, nil)
	ctx := context.Background()
	data := storetest.Data(9, 1<<20)
	if err := tiered.PutBytes(ctx, s, "resume", data); err != nil {
		t.Fatal(err)
	}
	ft.breakBodies.Store(3)
	got, err := tiered.ReadAll(ctx, s, "resume", 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("resumed read returned %d bytes that differ", len(got))
	}
	ft.breakBodies.Store(3)
	rc, err := s.GetRange(ctx, "resume", 50_000, 400_000)
	if err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data[50_000:450_000]) {
		t.Fatalf("resumed ranged read: %d bytes, %v", len(got), err)
	}
	// More breaks than attempts: the read fails loudly instead of
	// returning short data.
	ft.breakBodiesAfter = 10 << 10
	ft.breakBodies.Store(1000)
	if _, err := tiered.ReadAll(ctx, s, "resume", 0); err == nil {
		t.Fatal("a read that broke every time succeeded")
	}
}

// A resumed read never mixes two versions of an object.
func TestResumeDetectsReplacement(t *testing.T) {
	s3test.RequireReal(t, "gofakes3 ignores If-Match on GET")
	ft := &flakyTransport{breakBodiesAfter: 64 << 10}
	s := openWith(t, ft, nil)
	ctx := context.Background()
	tiered.PutBytes(ctx, s, "v", storetest.Data(1, 256<<10))
	ft.breakBodies.Store(1)
	rc, err := s.Get(ctx, "v")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	buf := make([]byte, 32<<10)
	if _, err := io.ReadFull(rc, buf); err != nil {
		t.Fatal(err)
	}
	tiered.PutBytes(ctx, s, "v", storetest.Data(2, 256<<10))
	if _, err := io.ReadAll(rc); err == nil || !strings.Contains(err.Error(), "replaced") {
		t.Fatalf("read across a replacement: %v", err)
	}
}

// The SDK's retryer rides over 503s.
func TestRetriesServerErrors(t *testing.T) {
	ft := &flakyTransport{}
	s := openWith(t, ft, nil)
	ctx := context.Background()
	ft.fail503.Store(3)
	if err := tiered.PutBytes(ctx, s, "retried", []byte("x")); err != nil {
		t.Fatalf("put after 3 503s: %v", err)
	}
	ft.fail503.Store(100)
	err := tiered.PutBytes(ctx, s, "given-up", []byte("x"))
	if err == nil || !strings.Contains(err.Error(), "given-up") {
		t.Fatalf("put after endless 503s: %v (want an error naming the object)", err)
	}
	ft.fail503.Store(0)
}

func TestRequestTimeout(t *testing.T) {
	ft := &flakyTransport{}
	s := openWith(t, ft, func(o *s3store.Options) { o.RequestTimeout = 50 * time.Millisecond; o.MaxAttempts = 1 })
	ft.delay = time.Second
	start := time.Now()
	_, err := s.Stat(context.Background(), "slow")
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stat through a slow server: %v", err)
	}
	if time.Since(start) > 900*time.Millisecond {
		t.Fatalf("timeout took %v", time.Since(start))
	}
}

// A multipart upload that fails part way is aborted: no incomplete upload
// is left behind.
func TestMultipartAbortedOnFailure(t *testing.T) {
	ft := &flakyTransport{}
	s := openWith(t, ft, nil)
	ctx := context.Background()
	data := storetest.Data(3, 3*s3store.MinPartSize)
	r := io.MultiReader(bytes.NewReader(data[:2*s3store.MinPartSize+10]), errReader{})
	if err := s.Put(ctx, "aborted", r, int64(len(data))); err == nil {
		t.Fatal("put from a broken reader succeeded")
	}
	prefix := s.Options().Prefix
	out, err := s.Client().ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{
		Bucket: aws.String(s.Options().Bucket), Prefix: aws.String(prefix),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range out.Uploads {
		if strings.HasSuffix(aws.ToString(u.Key), "aborted") {
			t.Fatalf("incomplete upload left: %s %s", aws.ToString(u.Key), aws.ToString(u.UploadId))
		}
	}
	// A canceled context aborts too.
	cctx, cancel := context.WithCancel(ctx)
	pr, pw := io.Pipe()
	go func() {
		pw.Write(data[:s3store.MinPartSize+1])
		cancel()
		pw.Close()
	}()
	if err := s.Put(cctx, "canceled", pr, int64(len(data))); err == nil {
		t.Fatal("canceled multipart put succeeded")
	}
	if _, err := s.Stat(ctx, "canceled"); !errors.Is(err, tiered.ErrNotFound) {
		t.Fatalf("canceled put left an object: %v", err)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("reader broke") }

func TestBadCredentialsRefused(t *testing.T) {
	s3test.RequireReal(t, "gofakes3 accepts any credentials")
	opts := s3test.RealOptions(t)
	opts.SecretAccessKey = "wrong"
	opts.MaxAttempts = 1
	if _, err := s3store.Open(context.Background(), opts); err == nil {
		t.Fatal("open with a wrong secret succeeded")
	}
	opts = s3test.RealOptions(t)
	opts.Bucket = "no-such-bucket-here"
	_, err := s3store.Open(context.Background(), opts)
	if err == nil || !strings.Contains(err.Error(), "no-such-bucket-here") {
		t.Fatalf("open of a missing bucket: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	o := s3store.Options{PartSize: 1 << 20, Concurrency: -1, AccessKeyID: "k", Prefix: "../x"}
	o.EnsureDefaults()
	err := o.Validate()
	if err == nil {
		t.Fatal("bad options validated")
	}
	for _, want := range []string{"no bucket", "part size", "concurrency", "secret", "prefix"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("validation error %q does not mention %q", err, want)
		}
	}
	if _, err := s3store.Open(context.Background(), s3store.Options{}); err == nil {
		t.Fatal("open without a bucket succeeded")
	}
}

// Objects outside the store's prefix stay invisible and untouched.
func TestPrefixIsolation(t *testing.T) {
	opts, _ := s3test.Options(t)
	ctx := context.Background()
	root, err := s3store.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	sub := opts
	if sub.Prefix != "" {
		sub.Prefix += "/"
	}
	sub.Prefix += "job-a"
	a, err := s3store.Open(ctx, sub)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tiered.PutBytes(ctx, root, "job-ab/x", []byte("neighbour"))
	tiered.PutBytes(ctx, a, "x", []byte("mine"))
	page, err := a.List(ctx, "", "", 0)
	if err != nil || len(page.Objects) != 1 || page.Objects[0].Name != "x" {
		t.Fatalf("list in prefix: %+v %v", page, err)
	}
	if err := a.DeleteBatch(ctx, []string{"x"}); err != nil {
		t.Fatal(err)
	}
	if b, err := tiered.ReadAll(ctx, root, "job-ab/x", 0); err != nil || string(b) != "neighbour" {
		t.Fatalf("neighbour: %q %v", b, err)
	}
}
