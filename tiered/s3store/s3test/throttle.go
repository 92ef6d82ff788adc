package s3test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Throttler is a reverse proxy in front of an S3 server that answers
// requests with an error of the server's choosing instead of passing them
// on: 503 SlowDown, as S3 answers a request rate above its limit, for a
// number of requests or a spell of time.
type Throttler struct {
	// URL is the proxy's address, to use as the endpoint.
	URL string

	mu       sync.Mutex
	left     int       // requests still to answer with the error
	until    time.Time // answer with the error until then
	status   int
	code     string
	answered atomic.Int64 // requests answered with the error
	passed   atomic.Int64 // requests passed on
}

// NewThrottler starts a proxy to endpoint, stopped when t ends. It passes
// every request on until SlowDown or Fail is called.
func NewThrottler(t testing.TB, endpoint string) *Throttler {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatalf("s3test: endpoint %q: %v", endpoint, err)
	}
	th := &Throttler{}
	// The Host header stays the proxy's: the client signed it.
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status, code, ok := th.take(); ok {
			th.answered.Add(1)
			w.Header().Set("Content-Type", "application/xml")
			if status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "0")
			}
			w.WriteHeader(status)
			if r.Method != http.MethodHead {
				_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?>` +
					"<Error><Code>" + code + "</Code><Message>injected by s3test.Throttler</Message>" +
					"<RequestId>s3test</RequestId></Error>"))
			}
			return
		}
		th.passed.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	th.URL = srv.URL
	return th
}

func (th *Throttler) take() (int, string, bool) {
	th.mu.Lock()
	defer th.mu.Unlock()
	if th.left > 0 {
		th.left--
		return th.status, th.code, true
	}
	if time.Now().Before(th.until) {
		return th.status, th.code, true
	}
	return 0, "", false
}

// SlowDown answers the next n requests, and every request for d, with 503
// SlowDown.
func (th *Throttler) SlowDown(n int, d time.Duration) {
	th.Fail(n, d, http.StatusServiceUnavailable, "SlowDown")
}

// Fail answers the next n requests, and every request for d, with status
// and the error code.
func (th *Throttler) Fail(n int, d time.Duration, status int, code string) {
	th.mu.Lock()
	defer th.mu.Unlock()
	th.left, th.status, th.code = n, status, code
	th.until = time.Now().Add(d)
}

// Answered is the number of requests answered with the error so far.
func (th *Throttler) Answered() int64 { return th.answered.Load() }

// Passed is the number of requests passed on to the server so far.
func (th *Throttler) Passed() int64 { return th.passed.Load() }
