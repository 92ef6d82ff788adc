package remotestore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/statedhq/stated/backend/lsm/remotestore"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/metered"
	"github.com/statedhq/stated/tiered/s3store/s3test"
	"github.com/statedhq/stated/tiered/storetest"
)

// newStore returns an empty tiered.Store that t cleans up.
type newStore func(t testing.TB) tiered.Store

func memStore(t testing.TB) tiered.Store {
	s := memstore.New()
	t.Cleanup(func() { s.Close() })
	return s
}

func localStore(t testing.TB) tiered.Store {
	s, err := localfs.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// s3Store is the S3 server the tiered tests use: the real one when
// s3test's environment names one, else in-process gofakes3.
func s3Store(t testing.TB) tiered.Store { return s3test.Store(t) }

func TestConformanceMemstore(t *testing.T) { runConformance(t, memStore) }
func TestConformanceLocalfs(t *testing.T)  { runConformance(t, localStore) }
func TestConformanceS3(t *testing.T)       { runConformance(t, s3Store) }

// harness is a Storage over a metered store, with a small spool limit so
// that objects of a few KiB take the temporary-file path.
type harness struct {
	st    *remotestore.Storage
	m     *metered.Store
	spool string
}

func newHarness(t *testing.T, ns newStore) harness {
	t.Helper()
	m := metered.New(ns(t))
	spool := t.TempDir()
	st, err := remotestore.New(remotestore.Options{Store: m, SpoolDir: spool, SpoolMemoryBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return harness{st: st, m: m, spool: spool}
}

// create writes b in uneven chunks, as Pebble's block writes are.
func create(t *testing.T, st remote.Storage, name string, b []byte) {
	t.Helper()
	w, err := st.CreateObject(name)
	if err != nil {
		t.Fatal(err)
	}
	for rest, chunk := b, 1; len(rest) > 0; chunk = chunk*3 + 1 {
		n := min(chunk, len(rest))
		if k, err := w.Write(rest[:n]); err != nil || k != n {
			t.Fatalf("write %s: wrote %d of %d: %v", name, k, n, err)
		}
		rest = rest[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatalf("close %s: %v", name, err)
	}
}

func readRange(t *testing.T, st remote.Storage, name string, off, n int64) ([]byte, error) {
	t.Helper()
	r, _, err := st.ReadObject(context.Background(), name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	p := make([]byte, n)
	return p, r.ReadAt(context.Background(), p, off)
}

func runConformance(t *testing.T, ns newStore) {
	t.Run("RangedReads", func(t *testing.T) { testRangedReads(t, ns) })
	t.Run("EmptyObject", func(t *testing.T) { testEmptyObject(t, ns) })
	t.Run("NotExist", func(t *testing.T) { testNotExist(t, ns) })
	t.Run("List", func(t *testing.T) { testList(t, ns) })
	t.Run("Overwrite", func(t *testing.T) { testOverwrite(t, ns) })
	t.Run("FailedWriteUploadsNothing", func(t *testing.T) { testFailedWrite(t, ns) })
	t.Run("ConcurrentReads", func(t *testing.T) { testConcurrentReads(t, ns) })
}

// testRangedReads checks contents, and that each ReadAt is one GetRange
// that moves only the bytes asked for: never the whole object.
func testRangedReads(t *testing.T, ns newStore) {
	h := newHarness(t, ns)
	data := storetest.Data(1, 300<<10)
	create(t, h.st, "0a1b-7-000005.sst", data)
	if ents, _ := os.ReadDir(h.spool); len(ents) != 0 {
		t.Fatalf("spool directory keeps %d files after Close", len(ents))
	}
	up := h.m.Counts()
	if up.Calls[tiered.OpPut] != 1 || up.BytesUp != uint64(len(data)) {
		t.Fatalf("create: %d puts of %d bytes, want 1 of %d", up.Calls[tiered.OpPut], up.BytesUp, len(data))
	}
	r, size, err := h.st.ReadObject(context.Background(), "0a1b-7-000005.sst")
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if size != int64(len(data)) {
		t.Fatalf("size %d, want %d", size, len(data))
	}
	before := h.m.Counts()
	ranges := [][2]int64{{0, 1}, {0, 4096}, {1000, 32 << 10}, {int64(len(data)) - 17, 17}, {123457, 65536}, {5, 0}}
	var moved int64
	for _, rg := range ranges {
		p := make([]byte, rg[1])
		if err := r.ReadAt(context.Background(), p, rg[0]); err != nil {
			t.Fatalf("ReadAt(%d, %d): %v", rg[0], rg[1], err)
		}
		if !bytes.Equal(p, data[rg[0]:rg[0]+rg[1]]) {
			t.Fatalf("ReadAt(%d, %d): wrong bytes", rg[0], rg[1])
		}
		moved += rg[1]
	}
	after := h.m.Counts()
	if got := after.Calls[tiered.OpGetRange] - before.Calls[tiered.OpGetRange]; got != uint64(len(ranges)-1) {
		t.Errorf("%d ranged reads for %d non-empty ReadAts", got, len(ranges)-1)
	}
	if got := after.Calls[tiered.OpGet] - before.Calls[tiered.OpGet]; got != 0 {
		t.Errorf("%d whole-object reads", got)
	}
	if got := after.BytesDown - before.BytesDown; got != uint64(moved) {
		t.Errorf("read %d bytes from the store for %d asked", got, moved)
	}
	for _, rg := range [][2]int64{{int64(len(data)) - 1, 2}, {int64(len(data)) + 1, 0}, {-1, 1}} {
		err := r.ReadAt(context.Background(), make([]byte, rg[1]), rg[0])
		if !errors.Is(err, remotestore.ErrShortObject) || !strings.Contains(err.Error(), "0a1b-7-000005.sst") {
			t.Errorf("ReadAt(%d, %d) past the end: %v, want ErrShortObject naming the object", rg[0], rg[1], err)
		}
	}
	if got := h.m.Counts().Calls[tiered.OpGetRange] - after.Calls[tiered.OpGetRange]; got != 0 {
		t.Errorf("reads past the end made %d requests, want none", got)
	}
}

// testEmptyObject is the shape of Pebble's ref markers.
func testEmptyObject(t *testing.T, ns newStore) {
	h := newHarness(t, ns)
	create(t, h.st, "x.sst.ref.7.000005", nil)
	if n, err := h.st.Size("x.sst.ref.7.000005"); err != nil || n != 0 {
		t.Fatalf("Size = %d, %v; want 0", n, err)
	}
	if p, err := readRange(t, h.st, "x.sst.ref.7.000005", 0, 0); err != nil || len(p) != 0 {
		t.Fatalf("empty read: %v", err)
	}
}

func testNotExist(t *testing.T, ns newStore) {
	h := newHarness(t, ns)
	check := func(what string, err error) {
		t.Helper()
		if err == nil || !h.st.IsNotExistError(err) || !strings.Contains(err.Error(), "gone.sst") {
			t.Errorf("%s: %v, want a not-exist error naming gone.sst", what, err)
		}
	}
	_, _, err := h.st.ReadObject(context.Background(), "gone.sst")
	check("ReadObject", err)
	_, err = h.st.Size("gone.sst")
	check("Size", err)
	if err := h.st.Delete("gone.sst"); err != nil {
		t.Errorf("Delete of a missing object: %v", err)
	}
	// An object deleted under an open reader.
	create(t, h.st, "gone.sst", storetest.Data(2, 100))
	r, _, err := h.st.ReadObject(context.Background(), "gone.sst")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.st.Delete("gone.sst"); err != nil {
		t.Fatal(err)
	}
	check("ReadAt after Delete", r.ReadAt(context.Background(), make([]byte, 10), 0))
	if h.st.IsNotExistError(errors.New("gone.sst: some other failure")) {
		t.Error("IsNotExistError is true for an unrelated error")
	}
	// A name no store accepts fails before any I/O, naming it.
	if _, err := h.st.CreateObject("../escape.sst"); !errors.Is(err, tiered.ErrInvalidName) || !strings.Contains(err.Error(), "../escape.sst") {
		t.Errorf("CreateObject(../escape.sst): %v", err)
	}
}

// testList checks the four examples of remote.Storage.List's comment, and
// the ref-marker listing objstorageprovider's sharedUnref makes.
func testList(t *testing.T, ns newStore) {
	h := newHarness(t, ns)
	for _, n := range []string{"a", "b/4", "b/5", "b/6", "c.sst", "c.sst.ref.1.000004", "c.sst.ref.2.000009", "cd.sst"} {
		create(t, h.st, n, []byte(n))
	}
	for _, c := range []struct {
		prefix, delim string
		want          []string
	}{
		{"", "", []string{"a", "b/4", "b/5", "b/6", "c.sst", "c.sst.ref.1.000004", "c.sst.ref.2.000009", "cd.sst"}},
		{"", "/", []string{"a", "b", "c.sst", "c.sst.ref.1.000004", "c.sst.ref.2.000009", "cd.sst"}},
		{"b", "/", []string{"4", "5", "6"}},
		{"b", "", []string{"/4", "/5", "/6"}},
		{"c.sst.ref.", "", []string{"1.000004", "2.000009"}},
		{"c.sst.ref.", ".", []string{"1", "2"}},
		{"zz", "", []string{}},
	} {
		got, err := h.st.List(c.prefix, c.delim)
		if err != nil {
			t.Fatalf("List(%q, %q): %v", c.prefix, c.delim, err)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("List(%q, %q) = %q, want %q", c.prefix, c.delim, got, c.want)
		}
	}
}

func testOverwrite(t *testing.T, ns newStore) {
	h := newHarness(t, ns)
	create(t, h.st, "o.sst", storetest.Data(3, 9000))
	second := storetest.Data(4, 5000)
	create(t, h.st, "o.sst", second)
	got, err := readRange(t, h.st, "o.sst", 0, int64(len(second)))
	if err != nil || !bytes.Equal(got, second) {
		t.Fatalf("after overwrite: %v, equal=%v", err, bytes.Equal(got, second))
	}
}

// testFailedWrite: a write that cannot spool uploads nothing, and Close
// reports why; a writer refuses use after Close.
func testFailedWrite(t *testing.T, ns newStore) {
	h := newHarness(t, ns)
	w, err := h.st.CreateObject("broken.sst")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(h.spool); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, 8<<10)); err == nil {
		t.Fatal("a write that had to spill into a missing directory succeeded")
	}
	err = w.Close()
	if err == nil || !strings.Contains(err.Error(), "broken.sst") || !strings.Contains(err.Error(), "not uploaded") {
		t.Fatalf("Close after a failed write: %v", err)
	}
	if _, err := h.st.Size("broken.sst"); !h.st.IsNotExistError(err) {
		t.Fatalf("a failed write left an object: %v", err)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, remotestore.ErrWriterClosed) {
		t.Errorf("Write after Close: %v", err)
	}
	if err := w.Close(); !errors.Is(err, remotestore.ErrWriterClosed) {
		t.Errorf("second Close: %v", err)
	}
}

// testConcurrentReads: Pebble calls ReadAt on one reader from several
// goroutines.
func testConcurrentReads(t *testing.T, ns newStore) {
	h := newHarness(t, ns)
	data := storetest.Data(5, 64<<10)
	create(t, h.st, "c.sst", data)
	r, _, err := h.st.ReadObject(context.Background(), "c.sst")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := int64(i * 7000)
			p := make([]byte, 5000)
			if err := r.ReadAt(context.Background(), p, off); err != nil {
				errs <- err
			} else if !bytes.Equal(p, data[off:off+5000]) {
				errs <- fmt.Errorf("wrong bytes at offset %d", off)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestKnownSize: with Options.KnownSize, ReadObject of an object whose
// size is known makes no store call, reads as before, and refuses reads
// past that size; an object of unknown size is still Stat'ed.
func TestKnownSize(t *testing.T) {
	ctx := context.Background()
	m := metered.New(memstore.New())
	data := bytes.Repeat([]byte("0123456789"), 100)
	if err := tiered.PutBytes(ctx, m, "a.sst", data); err != nil {
		t.Fatal(err)
	}
	if err := tiered.PutBytes(ctx, m, "b.sst", data); err != nil {
		t.Fatal(err)
	}
	st, err := remotestore.New(remotestore.Options{Store: m, SpoolDir: t.TempDir(),
		KnownSize: func(name string) (int64, bool) { return int64(len(data)), name == "a.sst" }})
	if err != nil {
		t.Fatal(err)
	}
	stats := func() uint64 { return m.Counts().Calls[tiered.OpStat] }
	before := stats()
	r, size, err := st.ReadObject(ctx, "a.sst")
	if err != nil || size != int64(len(data)) {
		t.Fatalf("ReadObject of a known object: %d %v", size, err)
	}
	if n := stats() - before; n != 0 {
		t.Fatalf("ReadObject of an object of known size made %d Stat calls", n)
	}
	p := make([]byte, 10)
	if err := r.ReadAt(ctx, p, 990); err != nil || string(p) != "0123456789" {
		t.Fatalf("read the last 10 bytes: %q %v", p, err)
	}
	if err := r.ReadAt(ctx, p, 995); !errors.Is(err, remotestore.ErrShortObject) {
		t.Fatalf("read past the known size: %v", err)
	}
	_ = r.Close()
	if _, _, err := st.ReadObject(ctx, "b.sst"); err != nil || stats()-before != 1 {
		t.Fatalf("ReadObject of an object of unknown size: %v, %d Stat calls", err, stats()-before)
	}
}
