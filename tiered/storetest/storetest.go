package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/statedhq/stated/tiered"
)

// Harness describes the store under test.
type Harness struct {
	// New returns a store over an empty namespace. It registers its own
	// cleanup with t; the suite closes the store it gets, once.
	New func(t testing.TB) tiered.Store
	// Reopen, when set, returns a new store over the namespace of a store
	// New returned (after the suite closed it): the persistence check.
	// It receives the store New returned.
	Reopen func(t testing.TB, old tiered.Store) tiered.Store
	// LargeSize is the size of the large-object test. Default 12 MiB: above
	// the 5 MiB part size the S3 tests configure, so uploads take the
	// multipart path.
	LargeSize int64
	// PartSize, when set, is the store's multipart part size; ranged reads
	// are then also checked across part boundaries.
	PartSize int64
	// ManyKeys is the number of objects of the listing test. Default (and
	// for values below 20) 2500: more than two S3 list pages and two
	// DeleteObjects batches.
	ManyKeys int
	// ConditionalMultipart says the store enforces PutIfAbsent races for
	// objects large enough to take its multipart path. gofakes3 does not
	// check If-None-Match on multipart completion, so its harness says
	// false, and the race runs against a real S3 server in CI instead.
	ConditionalMultipart bool
	// OpenAfterClose says Close leaves the store usable: a view
	// (tiered.WithPrefix) whose Close does not close the store under it.
	// Otherwise every operation after Close must fail.
	OpenAfterClose bool
}

func (h *Harness) defaults() {
	if h.LargeSize == 0 {
		h.LargeSize = 12 << 20
	}
	if h.ManyKeys < 20 {
		h.ManyKeys = 2500
	}
}

// Run runs the acceptance suite as subtests of t.
func Run(t *testing.T, h Harness) {
	h.defaults()
	tests := []struct {
		name string
		fn   func(*testing.T, Harness)
	}{
		{"InvalidNames", testInvalidNames},
		{"PutGetStat", testPutGetStat},
		{"ShortReaderFails", testShortReader},
		{"NotFound", testNotFound},
		{"GetRangeEdges", testGetRangeEdges},
		{"PutIfAbsent", testPutIfAbsent},
		{"PutIfAbsentRace", testPutIfAbsentRace},
		{"LargeObject", testLargeObject},
		{"ListMany", testListMany},
		{"ListPrefixes", testListPrefixes},
		{"DeleteBatch", testDeleteBatch},
		{"ConcurrentWriters", testConcurrentWriters},
		{"ReadersSeeWholeObjects", testAtomicReplace},
		{"CanceledContext", testCanceled},
		{"Persistence", testPersistence},
		{"CloseIdempotent", testClose},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, h) })
	}
}

func newStore(t *testing.T, h Harness) tiered.Store {
	t.Helper()
	s := h.New(t)
	t.Cleanup(func() { s.Close() })
	return s
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Data returns n deterministic pseudo-random bytes for seed.
func Data(seed uint64, n int) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

func put(t *testing.T, s tiered.Store, name string, b []byte) {
	t.Helper()
	if err := tiered.PutBytes(ctxT(t), s, name, b); err != nil {
		t.Fatalf("put %s: %v", name, err)
	}
}

func get(t *testing.T, s tiered.Store, name string) []byte {
	t.Helper()
	b, err := tiered.ReadAll(ctxT(t), s, name, 0)
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	return b
}

func getRange(ctx context.Context, s tiered.Store, name string, off, n int64) ([]byte, error) {
	rc, err := s.GetRange(ctx, name, off, n)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, err
	}
	return b, rc.Close()
}

func wantEqual(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: got %d bytes (sha256 %x), want %d bytes (sha256 %x)",
			what, len(got), sha256.Sum256(got), len(want), sha256.Sum256(want))
	}
}

func wantIs(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error %v, want one wrapping %v", what, err, target)
	}
}

func testInvalidNames(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := ctxT(t)
	for _, name := range []string{"", "/abs", "a/../b", "..", "a//b", "a/", "./a", "a/.", "a\\b", "a\x00b", strings.Repeat("x", 1025), ".tmp", ".tmp/x"} {
		wantIs(t, fmt.Sprintf("put %q", name), tiered.PutBytes(ctx, s, name, []byte("x")), tiered.ErrInvalidName)
		wantIs(t, fmt.Sprintf("put-if-absent %q", name), s.PutIfAbsent(ctx, name, bytes.NewReader(nil), 0), tiered.ErrInvalidName)
		_, err := s.Get(ctx, name)
		wantIs(t, fmt.Sprintf("get %q", name), err, tiered.ErrInvalidName)
		_, err = s.GetRange(ctx, name, 0, 1)
		wantIs(t, fmt.Sprintf("get-range %q", name), err, tiered.ErrInvalidName)
		_, err = s.Stat(ctx, name)
		wantIs(t, fmt.Sprintf("stat %q", name), err, tiered.ErrInvalidName)
		wantIs(t, fmt.Sprintf("delete %q", name), s.Delete(ctx, name), tiered.ErrInvalidName)
		wantIs(t, fmt.Sprintf("delete-batch %q", name), s.DeleteBatch(ctx, []string{"ok", name}), tiered.ErrInvalidName)
	}
	page, err := s.List(ctx, "", "", 0)
	if err != nil || len(page.Objects) != 0 {
		t.Fatalf("invalid names left objects behind: %+v, %v", page, err)
	}
	// A listing prefix may end anywhere, but its directory part must be a
	// valid name.
	for _, prefix := range []string{"a//b", "../x", "/abs/x", "a/./b"} {
		_, err := s.List(ctx, prefix, "", 0)
		wantIs(t, fmt.Sprintf("list %q", prefix), err, tiered.ErrInvalidName)
	}
}

func testPutGetStat(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := ctxT(t)
	before := time.Now().Add(-time.Hour)
	cases := map[string][]byte{
		"empty":                   {},
		"one":                     {0x00},
		"a/b/c/deep":              Data(1, 4097),
		"job-1/chk-7/op-0/_state": Data(2, 100_000),
		"unicode/ключ-✓":          []byte("utf-8 names work"),
		"spaces and+plus=%20":     []byte("odd characters"),
	}
	for name, b := range cases {
		put(t, s, name, b)
	}
	for name, b := range cases {
		wantEqual(t, "get "+name, get(t, s, name), b)
		info, err := s.Stat(ctx, name)
		if err != nil {
			t.Fatalf("stat %s: %v", name, err)
		}
		if info.Name != name || info.Size != int64(len(b)) {
			t.Fatalf("stat %s: %+v, want size %d", name, info, len(b))
		}
		if info.ModTime.Before(before) || info.ModTime.After(time.Now().Add(time.Hour)) {
			t.Fatalf("stat %s: modtime %v is not around now", name, info.ModTime)
		}
	}
	// Overwrite with other bytes; then put the same bytes again (idempotent).
	put(t, s, "a/b/c/deep", []byte("replaced"))
	wantEqual(t, "get after overwrite", get(t, s, "a/b/c/deep"), []byte("replaced"))
	put(t, s, "a/b/c/deep", []byte("replaced"))
	wantEqual(t, "get after idempotent put", get(t, s, "a/b/c/deep"), []byte("replaced"))
	// A name that is the directory part of another name. Object stores
	// allow it; a directory store may refuse it, but with an error and
	// without harming the other object.
	if err := tiered.PutBytes(ctx, s, "a/b", []byte("file beside a directory-like prefix")); err == nil {
		wantEqual(t, "get a/b", get(t, s, "a/b"), []byte("file beside a directory-like prefix"))
	} else if _, serr := s.Stat(ctx, "a/b"); !errors.Is(serr, tiered.ErrNotFound) {
		t.Fatalf("refused put of a/b (%v) left something: %v", err, serr)
	}
	wantEqual(t, "get a/b/c/deep", get(t, s, "a/b/c/deep"), []byte("replaced"))
}

// shortReader gives fewer bytes than the size passed to Put.
func testShortReader(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := ctxT(t)
	if err := s.Put(ctx, "short", bytes.NewReader([]byte("abc")), 10); err == nil {
		t.Fatal("put with 3 of 10 bytes succeeded")
	}
	if _, err := s.Stat(ctx, "short"); !errors.Is(err, tiered.ErrNotFound) {
		t.Fatalf("a failed put of a new object left something: stat error %v", err)
	}
	put(t, s, "kept", []byte("old"))
	if err := s.Put(ctx, "kept", bytes.NewReader([]byte("ne")), 3); err == nil {
		t.Fatal("put with 2 of 3 bytes succeeded")
	}
	wantEqual(t, "old object after a failed put", get(t, s, "kept"), []byte("old"))
	if err := s.Put(ctx, "kept", iotestErrReader{}, 5); err == nil {
		t.Fatal("put from a failing reader succeeded")
	}
	wantEqual(t, "old object after a failed read", get(t, s, "kept"), []byte("old"))
	if err := s.PutIfAbsent(ctx, "short2", bytes.NewReader([]byte("abc")), 10); err == nil {
		t.Fatal("put-if-absent with 3 of 10 bytes succeeded")
	}
	if err := s.PutIfAbsent(ctx, "short2", bytes.NewReader([]byte("abc")), 3); err != nil {
		t.Fatalf("put-if-absent after a failed one: %v (the failed one must leave nothing)", err)
	}
}

type iotestErrReader struct{}

func (iotestErrReader) Read([]byte) (int, error) { return 0, errors.New("storetest: reader broke") }

func testNotFound(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := ctxT(t)
	_, err := s.Get(ctx, "missing")
	wantIs(t, "get missing", err, tiered.ErrNotFound)
	_, err = s.GetRange(ctx, "missing", 0, 10)
	wantIs(t, "get-range missing", err, tiered.ErrNotFound)
	_, err = s.GetRange(ctx, "missing", 0, 0)
	wantIs(t, "get-range missing length 0", err, tiered.ErrNotFound)
	_, err = s.Stat(ctx, "missing")
	wantIs(t, "stat missing", err, tiered.ErrNotFound)
	if err := s.Delete(ctx, "missing"); err != nil {
		t.Fatalf("delete missing: %v", err)
	}
	if err := s.DeleteBatch(ctx, []string{"missing", "also/missing"}); err != nil {
		t.Fatalf("delete-batch missing: %v", err)
	}
	if err := s.DeleteBatch(ctx, nil); err != nil {
		t.Fatalf("delete-batch of nothing: %v", err)
	}
	put(t, s, "dir/x", []byte("x"))
	_, err = s.Get(ctx, "dir")
	wantIs(t, "get of a name that is only a prefix", err, tiered.ErrNotFound)
	_, err = s.Stat(ctx, "dir")
	wantIs(t, "stat of a name that is only a prefix", err, tiered.ErrNotFound)
	if err := s.Delete(ctx, "dir/x"); err != nil {
		t.Fatal(err)
	}
	_, err = s.Get(ctx, "dir/x")
	wantIs(t, "get after delete", err, tiered.ErrNotFound)
	if err := s.Delete(ctx, "dir/x"); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	_, err = tiered.ReadAll(ctx, s, "dir/x", 10)
	if !tiered.IsNotFound(err) {
		t.Fatalf("ReadAll of a deleted object: %v", err)
	}
}

func testGetRangeEdges(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := ctxT(t)
	data := Data(3, 1000)
	put(t, s, "obj", data)
	put(t, s, "empty", nil)
	n := int64(len(data))
	ok := []struct{ off, length, from, to int64 }{
		{0, -1, 0, n},
		{0, n, 0, n},
		{0, n + 100, 0, n},
		{0, 1, 0, 1},
		{1, 1, 1, 2},
		{n - 1, 1, n - 1, n},
		{n - 1, -1, n - 1, n},
		{n - 1, 50, n - 1, n},
		{100, 0, 100, 100},
		{n, 0, n, n},
		{123, 456, 123, 579},
		{500, -1, 500, n},
	}
	for _, c := range ok {
		got, err := getRange(ctx, s, "obj", c.off, c.length)
		if err != nil {
			t.Fatalf("range (%d, %d): %v", c.off, c.length, err)
		}
		wantEqual(t, fmt.Sprintf("range (%d, %d)", c.off, c.length), got, data[c.from:c.to])
	}
	for _, c := range []struct{ off, length int64 }{{n, 1}, {n, -1}, {n + 1, 1}, {n + 1, 0}, {-1, 5}, {1 << 40, 1}} {
		_, err := getRange(ctx, s, "obj", c.off, c.length)
		wantIs(t, fmt.Sprintf("range (%d, %d)", c.off, c.length), err, tiered.ErrInvalidRange)
	}
	for _, length := range []int64{-1, 0, 10} {
		got, err := getRange(ctx, s, "empty", 0, length)
		if err != nil || len(got) != 0 {
			t.Fatalf("range (0, %d) of an empty object: %q, %v", length, got, err)
		}
	}
	_, err := getRange(ctx, s, "empty", 1, 1)
	wantIs(t, "range (1, 1) of an empty object", err, tiered.ErrInvalidRange)
}

func testPutIfAbsent(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := ctxT(t)
	if err := s.PutIfAbsent(ctx, "once", bytes.NewReader([]byte("first")), 5); err != nil {
		t.Fatal(err)
	}
	err := s.PutIfAbsent(ctx, "once", bytes.NewReader([]byte("second")), 6)
	wantIs(t, "second put-if-absent", err, tiered.ErrExists)
	wantEqual(t, "winner's bytes", get(t, s, "once"), []byte("first"))
	if err := s.PutIfAbsent(ctx, "empty", bytes.NewReader(nil), 0); err != nil {
		t.Fatal(err)
	}
	wantIs(t, "put-if-absent over an empty object", s.PutIfAbsent(ctx, "empty", bytes.NewReader(nil), 0), tiered.ErrExists)
	// After a delete the name is free again.
	if err := s.Delete(ctx, "once"); err != nil {
		t.Fatal(err)
	}
	if err := s.PutIfAbsent(ctx, "once", bytes.NewReader([]byte("third")), 5); err != nil {
		t.Fatalf("put-if-absent after delete: %v", err)
	}
	wantEqual(t, "after delete and put-if-absent", get(t, s, "once"), []byte("third"))
}

// race runs writers concurrent PutIfAbsent calls of distinct contents of
// size bytes on name and checks exactly one wins and its bytes are stored.
func race(t *testing.T, s tiered.Store, name string, writers, size int) {
	ctx := ctxT(t)
	var wins atomic.Int32
	winner := make(chan int, writers)
	errs := make(chan error, writers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			b := Data(uint64(1000+i), size)
			<-start
			err := s.PutIfAbsent(ctx, name, bytes.NewReader(b), int64(len(b)))
			switch {
			case err == nil:
				wins.Add(1)
				winner <- i
			case errors.Is(err, tiered.ErrExists):
			default:
				errs <- fmt.Errorf("writer %d: %w", i, err)
			}
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("put-if-absent race on %s: unexpected error %v", name, err)
	}
	if n := wins.Load(); n != 1 {
		t.Fatalf("put-if-absent race on %s: %d winners, want exactly 1", name, n)
	}
	w := <-winner
	wantEqual(t, "race winner's bytes", get(t, s, name), Data(uint64(1000+w), size))
}

func testPutIfAbsentRace(t *testing.T, h Harness) {
	s := newStore(t, h)
	for round := range 5 {
		race(t, s, fmt.Sprintf("race/%d", round), 16, 1000+round)
	}
}

func testLargeObject(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := ctxT(t)
	data := Data(4, int(h.LargeSize))
	put(t, s, "large/a", data)
	wantEqual(t, "large get", get(t, s, "large/a"), data)
	info, err := s.Stat(ctx, "large/a")
	if err != nil || info.Size != h.LargeSize {
		t.Fatalf("large stat: %+v, %v", info, err)
	}
	n := h.LargeSize
	edges := [][2]int64{{0, 1}, {n - 1, 1}, {n / 2, 4096}, {n - 10, -1}, {1, n - 2}}
	if p := h.PartSize; p > 0 {
		for b := p; b < n; b += p {
			edges = append(edges, [2]int64{b - 1, 2}, [2]int64{b - 3, 7}, [2]int64{b, 1}, [2]int64{b - 1, -1})
		}
	}
	for _, e := range edges {
		got, err := getRange(ctx, s, "large/a", e[0], e[1])
		if err != nil {
			t.Fatalf("large range (%d, %d): %v", e[0], e[1], err)
		}
		end := n
		if e[1] >= 0 && e[0]+e[1] < n {
			end = e[0] + e[1]
		}
		wantEqual(t, fmt.Sprintf("large range (%d, %d)", e[0], e[1]), got, data[e[0]:end])
	}
	// Overwrite a large object with a small one and back.
	put(t, s, "large/a", []byte("small now"))
	wantEqual(t, "large replaced by small", get(t, s, "large/a"), []byte("small now"))
	other := Data(5, int(h.LargeSize)+1)
	if err := s.PutIfAbsent(ctx, "large/b", bytes.NewReader(other), int64(len(other))); err != nil {
		t.Fatalf("large put-if-absent: %v", err)
	}
	wantIs(t, "large put-if-absent over an existing object",
		s.PutIfAbsent(ctx, "large/b", bytes.NewReader(data), int64(len(data))), tiered.ErrExists)
	wantEqual(t, "large put-if-absent kept the first", get(t, s, "large/b"), other)
	// A large upload whose reader breaks half way leaves nothing.
	broken := io.MultiReader(bytes.NewReader(data[:n/2]), iotestErrReader{})
	if err := s.Put(ctx, "large/broken", broken, n); err == nil {
		t.Fatal("large put from a reader that broke half way succeeded")
	}
	_, err = s.Stat(ctx, "large/broken")
	wantIs(t, "stat after a broken large put", err, tiered.ErrNotFound)
	if h.ConditionalMultipart {
		race(t, s, "large/race", 3, int(h.LargeSize))
	}
}

func listAll(t *testing.T, s tiered.Store, prefix string, limit int) []tiered.ObjectInfo {
	t.Helper()
	ctx := ctxT(t)
	var all []tiered.ObjectInfo
	after := ""
	for pages := 0; ; pages++ {
		if pages > 100000 {
			t.Fatal("listing does not end")
		}
		page, err := s.List(ctx, prefix, after, limit)
		if err != nil {
			t.Fatalf("list %q after %q: %v", prefix, after, err)
		}
		if limit > 0 && len(page.Objects) > limit {
			t.Fatalf("list %q: page of %d objects, limit %d", prefix, len(page.Objects), limit)
		}
		for _, o := range page.Objects {
			if !strings.HasPrefix(o.Name, prefix) || o.Name <= after {
				t.Fatalf("list %q after %q returned %q", prefix, after, o.Name)
			}
			if len(all) > 0 && o.Name <= all[len(all)-1].Name {
				t.Fatalf("list %q: %q after %q: not sorted or repeated", prefix, o.Name, all[len(all)-1].Name)
			}
			all = append(all, o)
		}
		if page.Next == "" {
			return all
		}
		if len(page.Objects) > 0 && page.Next < page.Objects[len(page.Objects)-1].Name {
			t.Fatalf("list %q: next %q is before the page's last object", prefix, page.Next)
		}
		after = page.Next
	}
}

func names(infos []tiered.ObjectInfo) []string {
	out := make([]string, len(infos))
	for i, o := range infos {
		out[i] = o.Name
	}
	return out
}

// parallel runs fn(i) for i in [0, n) on workers goroutines and fails t on
// the first error.
func parallel(t *testing.T, n, workers int, fn func(i int) error) {
	t.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := fn(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func testListMany(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := ctxT(t)
	var want []string
	for i := range h.ManyKeys {
		want = append(want, fmt.Sprintf("many/%05d", i))
	}
	parallel(t, len(want), 8, func(i int) error {
		return tiered.PutBytes(ctx, s, want[i], []byte(want[i]))
	})
	put(t, s, "other/x", []byte("x"))
	put(t, s, "manz", []byte("sorts after many/"))
	for _, limit := range []int{0, 1000, 333} {
		got := listAll(t, s, "many/", limit)
		if !slices.Equal(names(got), want) {
			t.Fatalf("list many/ with limit %d: %d names, want %d", limit, len(got), len(want))
		}
		for _, o := range got {
			if o.Size != int64(len(o.Name)) {
				t.Fatalf("list: %s has size %d, want %d", o.Name, o.Size, len(o.Name))
			}
		}
	}
	all := listAll(t, s, "", 0)
	if len(all) != len(want)+2 {
		t.Fatalf("list of everything: %d objects, want %d", len(all), len(want)+2)
	}
	// StartAfter in the middle, at a name that does not exist, and at the end.
	mid := len(want) / 2
	page, err := s.List(ctx, "many/", want[mid-1], 5)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names(page.Objects), want[mid:mid+5]) || page.Next != want[mid+4] {
		t.Fatalf("list after %s: %v next %q", want[mid-1], names(page.Objects), page.Next)
	}
	page, err = s.List(ctx, "many/", want[mid-1]+"x", 2)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names(page.Objects), want[mid:mid+2]) {
		t.Fatalf("list after a missing name: %v", names(page.Objects))
	}
	page, err = s.List(ctx, "many/", want[len(want)-1], 0)
	if err != nil || len(page.Objects) != 0 || page.Next != "" {
		t.Fatalf("list after the last name: %+v, %v", page, err)
	}
	var walked, wantWalked int
	for _, n := range want {
		if strings.HasPrefix(n, "many/01") {
			wantWalked++
		}
	}
	if err := tiered.Walk(ctx, s, "many/01", func(o tiered.ObjectInfo) error { walked++; return nil }); err != nil {
		t.Fatal(err)
	}
	if walked != wantWalked {
		t.Fatalf("walk many/01: %d objects, want %d", walked, wantWalked)
	}
	// Delete everything in one batch: more than one S3 DeleteObjects call.
	if err := s.DeleteBatch(ctx, want); err != nil {
		t.Fatalf("delete-batch of %d: %v", len(want), err)
	}
	if left := listAll(t, s, "many/", 0); len(left) != 0 {
		t.Fatalf("%d objects left after delete-batch, first %q", len(left), left[0].Name)
	}
	wantEqual(t, "untouched object", get(t, s, "manz"), []byte("sorts after many/"))
}

func testListPrefixes(t *testing.T, h Harness) {
	s := newStore(t, h)
	objs := []string{"job/chk-1/a", "job/chk-1/b", "job/chk-10/a", "job/chk-2/a", "job/shared/x", "job2/chk-1/a", "jo", "z"}
	for _, n := range objs {
		put(t, s, n, []byte(n))
	}
	cases := map[string][]string{
		"":            objs,
		"job/chk-1":   {"job/chk-1/a", "job/chk-1/b", "job/chk-10/a"},
		"job/chk-1/":  {"job/chk-1/a", "job/chk-1/b"},
		"job/":        {"job/chk-1/a", "job/chk-1/b", "job/chk-10/a", "job/chk-2/a", "job/shared/x"},
		"job":         {"job/chk-1/a", "job/chk-1/b", "job/chk-10/a", "job/chk-2/a", "job/shared/x", "job2/chk-1/a"},
		"jo":          {"jo", "job/chk-1/a", "job/chk-1/b", "job/chk-10/a", "job/chk-2/a", "job/shared/x", "job2/chk-1/a"},
		"nothing/":    nil,
		"job/chk-1/a": {"job/chk-1/a"},
	}
	for prefix, want := range cases {
		want = slices.Clone(want)
		slices.Sort(want)
		for _, limit := range []int{0, 1, 2} {
			got := names(listAll(t, s, prefix, limit))
			if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
				t.Fatalf("list %q limit %d: %q, want %q", prefix, limit, got, want)
			}
		}
	}
}

func testDeleteBatch(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := ctxT(t)
	for i := range 10 {
		put(t, s, fmt.Sprintf("d/%d", i), []byte{byte(i)})
	}
	if err := s.DeleteBatch(ctx, []string{"d/1", "d/3", "d/missing", "d/3"}); err != nil {
		t.Fatal(err)
	}
	got := names(listAll(t, s, "d/", 0))
	want := []string{"d/0", "d/2", "d/4", "d/5", "d/6", "d/7", "d/8", "d/9"}
	if !slices.Equal(got, want) {
		t.Fatalf("after delete-batch: %q, want %q", got, want)
	}
	if err := s.Delete(ctx, "d/0"); err != nil {
		t.Fatal(err)
	}
	_, err := s.Stat(ctx, "d/0")
	wantIs(t, "stat after delete", err, tiered.ErrNotFound)
	wantEqual(t, "neighbour survives", get(t, s, "d/2"), []byte{2})
}

func testConcurrentWriters(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx := ctxT(t)
	const writers, each = 8, 12
	parallel(t, writers*each, writers, func(i int) error {
		w, k := i%writers, i/writers
		// Distinct names, and one shared name all writers overwrite.
		if err := tiered.PutBytes(ctx, s, fmt.Sprintf("w/%d/%d", w, k), Data(uint64(i), 2000+i)); err != nil {
			return err
		}
		return tiered.PutBytes(ctx, s, "w/shared", Data(uint64(10_000+i), 3000))
	})
	for i := range writers * each {
		w, k := i%writers, i/writers
		wantEqual(t, "concurrent writer's object", get(t, s, fmt.Sprintf("w/%d/%d", w, k)), Data(uint64(i), 2000+i))
	}
	shared := get(t, s, "w/shared")
	found := false
	for i := range writers * each {
		if bytes.Equal(shared, Data(uint64(10_000+i), 3000)) {
			found = true
			break
		}
	}
	if !found {
		t.Fatal("the shared object holds bytes no writer wrote (a mix of writes?)")
	}
}

// testAtomicReplace overwrites one name with two alternating contents while
// readers check they always see one of them whole.
func testAtomicReplace(t *testing.T, h Harness) {
	s := newStore(t, h)
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	const size = 256 << 10
	versions := [][]byte{bytes.Repeat([]byte{'A'}, size), bytes.Repeat([]byte{'B'}, size)}
	put(t, s, "flip", versions[0])
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	wg.Go(func() {
		defer cancel()
		for i := range 30 {
			if err := tiered.PutBytes(ctx, s, "flip", versions[i%2]); err != nil {
				errs <- err
				return
			}
		}
	})
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				b, err := tiered.ReadAll(ctx, s, "flip", 0)
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					errs <- fmt.Errorf("read during overwrite: %w", err)
					return
				}
				if !bytes.Equal(b, versions[0]) && !bytes.Equal(b, versions[1]) {
					errs <- fmt.Errorf("read during overwrite saw a partial or mixed object (%d bytes)", len(b))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func testCanceled(t *testing.T, h Harness) {
	s := newStore(t, h)
	put(t, s, "c", []byte("c"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tiered.PutBytes(ctx, s, "c2", []byte("x")); err == nil {
		t.Fatal("put with a canceled context succeeded")
	}
	if _, err := s.Get(ctx, "c"); err == nil {
		t.Fatal("get with a canceled context succeeded")
	}
	if _, err := s.List(ctx, "", "", 0); err == nil {
		t.Fatal("list with a canceled context succeeded")
	}
	if _, err := s.GetRange(ctx, "c", 0, 1); err == nil {
		t.Fatal("get-range with a canceled context succeeded")
	}
	if _, err := s.Stat(ctx, "c"); err == nil {
		t.Fatal("stat with a canceled context succeeded")
	}
	if err := s.Delete(ctx, "c"); err == nil {
		t.Fatal("delete with a canceled context succeeded")
	}
	wantEqual(t, "object a canceled delete was given", get(t, s, "c"), []byte("c"))
	_, err := s.Stat(context.Background(), "c2")
	wantIs(t, "object of a canceled put", err, tiered.ErrNotFound)
}

func testPersistence(t *testing.T, h Harness) {
	if h.Reopen == nil {
		// Memory stores do not persist by design: nothing to check.
		return
	}
	s := h.New(t)
	put(t, s, "p/one", Data(6, 5000))
	put(t, s, "p/two", nil)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	r := h.Reopen(t, s)
	defer r.Close()
	wantEqual(t, "reopened get", get(t, r, "p/one"), Data(6, 5000))
	wantEqual(t, "reopened empty", get(t, r, "p/two"), nil)
	if got := names(listAll(t, r, "p/", 0)); !slices.Equal(got, []string{"p/one", "p/two"}) {
		t.Fatalf("reopened list: %q", got)
	}
}

func testClose(t *testing.T, h Harness) {
	s := h.New(t)
	put(t, s, "x", []byte("x"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
	if h.OpenAfterClose {
		return
	}
	ctx := ctxT(t)
	if err := tiered.PutBytes(ctx, s, "y", []byte("y")); err == nil {
		t.Fatal("put after close succeeded")
	}
	if _, err := s.Get(ctx, "x"); err == nil {
		t.Fatal("get after close succeeded")
	}
	if _, err := s.List(ctx, "", "", 0); err == nil {
		t.Fatal("list after close succeeded")
	}
}
