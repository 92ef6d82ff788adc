package s3store_test

import (
	"context"
	"testing"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/s3store"
	"github.com/statedhq/stated/tiered/s3store/s3test"
	"github.com/statedhq/stated/tiered/storetest"
)

// Small parts, so the 12 MiB large-object test takes the multipart path
// with three parts.
const testPartSize = s3store.MinPartSize

func open(t testing.TB, opts s3store.Options) *s3store.Store {
	t.Helper()
	opts.PartSize = testPartSize
	opts.Concurrency = 2
	s, err := s3store.Open(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func harness(options func(testing.TB) s3store.Options, real bool) storetest.Harness {
	return storetest.Harness{
		New: func(t testing.TB) tiered.Store { return open(t, options(t)) },
		Reopen: func(t testing.TB, old tiered.Store) tiered.Store {
			return open(t, old.(*s3store.Store).Options())
		},
		PartSize:             testPartSize,
		ConditionalMultipart: real,
	}
}

// TestAcceptanceFake runs the suite against in-process gofakes3.
func TestAcceptanceFake(t *testing.T) {
	storetest.Run(t, harness(s3test.FakeOptions, false))
}

// TestAcceptanceServer runs the suite against the real S3 server named by
// STATED_TEST_S3_ENDPOINT; .ci/run starts versitygw and sets it. It is the
// only run that checks conditional puts on the multipart path.
func TestAcceptanceServer(t *testing.T) {
	s3test.RequireReal(t, "the acceptance suite against a real server")
	storetest.Run(t, harness(s3test.RealOptions, true))
}

func TestUnderFaults(t *testing.T) {
	h := harness(func(t testing.TB) s3store.Options { o, _ := s3test.Options(t); return o }, s3test.Real())
	h.ManyKeys = 300 // the acceptance runs cover paging past 1000 keys
	storetest.RunUnderFaults(t, h, 3)
}
