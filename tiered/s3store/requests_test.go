package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cost"
	"github.com/statedhq/stated/tiered/metered"
	"github.com/statedhq/stated/tiered/s3store"
	"github.com/statedhq/stated/tiered/s3store/s3test"
)

// Every HTTP request is counted by its billing kind: the parts of a
// multipart upload, the bucket check, a batch delete as one request.
func TestRequestsCounted(t *testing.T) {
	ctx := context.Background()
	opts, _ := s3test.Options(t)
	s := open(t, opts)
	defer s.Close()
	m := metered.New(s)
	if !m.RequestsMeasured() {
		t.Fatal("metered does not see the s3 store's request counts")
	}
	big := bytes.Repeat([]byte("x"), 2*testPartSize+1) // three parts
	if err := tiered.PutBytes(ctx, m, "small", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := tiered.PutBytes(ctx, m, "big", big); err != nil {
		t.Fatal(err)
	}
	if _, err := tiered.ReadAll(ctx, m, "small", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Stat(ctx, "big"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.List(ctx, "", "", 0); err != nil {
		t.Fatal(err)
	}
	if err := m.DeleteBatch(ctx, []string{"small", "big", "missing"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Delete(ctx, "small"); err != nil {
		t.Fatal(err)
	}
	var want cost.Counts
	want.Requests = [cost.NumKinds]uint64{
		cost.Put:    1 + 5, // PutObject; create, three parts, complete
		cost.Get:    1,
		cost.Head:   1 + 1, // HeadBucket at Open; HeadObject
		cost.List:   1,
		cost.Delete: 2, // DeleteObjects; DeleteObject
	}
	if got := m.Requests(); got != want {
		t.Fatalf("requests\n %+v\nwant\n %+v", got, want)
	}
}

// Throttling answers are retried for longer than other errors, with
// backoff, counted, and never surfaced while the throttle budget lasts.
func TestThrottlingRetried(t *testing.T) {
	ctx := context.Background()
	opts, _ := s3test.Options(t)
	th := s3test.NewThrottler(t, opts.Endpoint)
	opts.Endpoint = th.URL
	opts.MaxAttempts = 3
	opts.MaxBackoff = 20 * time.Millisecond // keep the test short
	s := open(t, opts)
	defer s.Close()
	base := s.Requests()

	// Eight SlowDowns in a row: more than MaxAttempts, within the
	// throttle budget (20 attempts).
	th.SlowDown(8, 0)
	if err := tiered.PutBytes(ctx, s, "a", []byte("hello")); err != nil {
		t.Fatalf("a put throttled 8 times failed: %v", err)
	}
	got := s.Requests().Sub(base)
	if got.Throttled[cost.Put] != 8 || got.Retries[cost.Put] != 8 || got.Requests[cost.Put] != 9 {
		t.Fatalf("after 8 SlowDowns: %+v", got)
	}
	if th.Answered() != 8 {
		t.Fatalf("the proxy answered %d SlowDowns", th.Answered())
	}
	// 429 and RequestLimitExceeded are throttling too.
	th.Fail(4, 0, http.StatusTooManyRequests, "RequestLimitExceeded")
	if _, err := tiered.ReadAll(ctx, s, "a", 0); err != nil {
		t.Fatalf("a get throttled 4 times failed: %v", err)
	}
	if got := s.Requests().Sub(base); got.Throttled[cost.Get] != 4 {
		t.Fatalf("after 4 429s: %+v", got)
	}

	// Other errors end after MaxAttempts.
	th.Fail(10, 0, http.StatusInternalServerError, "InternalError")
	err := tiered.PutBytes(ctx, s, "b", []byte("hello"))
	var mae interface{ ErrorCode() string }
	if err == nil || !errors.As(err, &mae) || mae.ErrorCode() != "InternalError" {
		t.Fatalf("a put failing with 500: %v", err)
	}
	if n := th.Answered(); n != 8+4+3 {
		t.Fatalf("a failing put made %d attempts, want 3", n-12)
	}

	// A throttle that outlasts the budget surfaces, after
	// ThrottleMaxAttempts attempts, as a throttling error.
	th.SlowDown(1000, 0)
	err = tiered.PutBytes(ctx, s, "c", []byte("hello"))
	if !s3store.IsThrottle(err) {
		t.Fatalf("a put throttled past its budget: %v", err)
	}
	if n := th.Answered() - 15; n != int64(s.Options().ThrottleMaxAttempts) {
		t.Fatalf("a put throttled past its budget made %d attempts, want %d", n, s.Options().ThrottleMaxAttempts)
	}
}

// The client-side limiter paces requests: 30 requests at 50/s with a
// burst of 5 take at least (30-5)/50 s.
func TestRequestRateLimit(t *testing.T) {
	ctx := context.Background()
	opts, _ := s3test.Options(t)
	opts.RequestsPerSecond, opts.Burst, opts.SkipBucketCheck = 50, 5, true
	s := open(t, opts)
	defer s.Close()
	start := time.Now()
	for range 30 {
		if _, err := s.Stat(ctx, "missing"); !tiered.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	// A lower bound only: the limiter must have waited.
	if el := time.Since(start); el < 450*time.Millisecond {
		t.Fatalf("30 requests at 50/s, burst 5, took %s; want at least 500 ms", el)
	}
	if got := s.Requests().Requests[cost.Head]; got != 30 {
		t.Fatalf("%d HEADs counted, want 30", got)
	}
}

func TestThrottleOptions(t *testing.T) {
	o := s3store.Options{Bucket: "b", MaxAttempts: 8, ThrottleMaxAttempts: 4, RequestsPerSecond: -1}
	o.EnsureDefaults()
	err := o.Validate()
	if err == nil {
		t.Fatal("bad throttle options accepted")
	}
	for _, w := range []string{"throttle max attempts 4", "request rate -1"} {
		if !bytes.Contains([]byte(err.Error()), []byte(w)) {
			t.Errorf("%q does not say %q", err, w)
		}
	}
	o = s3store.Options{Bucket: "b", RequestsPerSecond: 2.5}
	o.EnsureDefaults()
	if err := o.Validate(); err != nil || o.Burst != 3 || o.ThrottleMaxAttempts != 20 || o.Requests == nil {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
}
