package tiered_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/statedhq/stated/tiered"
)

// fakeDriver answers from fixed data and records what reached it, so the
// tests see which checks Bucket makes before the driver is called.
type fakeDriver struct {
	calls   []string
	list    []tiered.ObjectInfo
	data    []byte
	closed  int
	opened  int // readers GetRange handed out and not closed
	putErr  error
	putSeen []byte
}

func (d *fakeDriver) Info() tiered.DriverInfo {
	return tiered.DriverInfo{Name: "fake", ListPageSize: 3}
}

func (d *fakeDriver) Put(_ context.Context, name string, r io.Reader, _ int64, _ bool) error {
	d.calls = append(d.calls, "put "+name)
	b, err := io.ReadAll(r)
	d.putSeen = b
	if err != nil {
		return err
	}
	return d.putErr
}

type closeCounter struct {
	io.Reader
	d *fakeDriver
}

func (c closeCounter) Close() error { c.d.opened--; return nil }

func (d *fakeDriver) GetRange(_ context.Context, name string, offset, length int64) (io.ReadCloser, int64, error) {
	d.calls = append(d.calls, "get "+name)
	if name == "missing" {
		return nil, 0, fs.ErrNotExist
	}
	d.opened++
	n := int64(len(d.data))
	from, to := min(offset, n), n
	if length >= 0 {
		to = min(to, from+length)
	}
	return closeCounter{bytes.NewReader(d.data[from:to]), d}, n, nil
}

func (d *fakeDriver) Stat(_ context.Context, name string) (tiered.ObjectInfo, error) {
	d.calls = append(d.calls, "stat "+name)
	return tiered.ObjectInfo{Name: "whatever", Size: 1}, nil
}

func (d *fakeDriver) List(_ context.Context, prefix, _ string, limit int) ([]tiered.ObjectInfo, bool, error) {
	d.calls = append(d.calls, "list "+prefix)
	return slices.Clone(d.list), false, nil
}

func (d *fakeDriver) Delete(_ context.Context, names []string) error {
	d.calls = append(d.calls, "delete "+strings.Join(names, ","))
	return fs.ErrNotExist
}

func (d *fakeDriver) Classify(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return tiered.ErrNotFound
	}
	return nil
}

func (d *fakeDriver) Close() error { d.closed++; return nil }

func TestBucketChecksBeforeTheDriver(t *testing.T) {
	d := &fakeDriver{data: []byte("0123456789")}
	b := tiered.New(d)
	ctx := context.Background()
	if err := tiered.PutBytes(ctx, b, "a/../b", []byte("x")); !errors.Is(err, tiered.ErrInvalidName) {
		t.Fatalf("invalid name: %v", err)
	}
	if _, err := b.GetRange(ctx, "x", -1, 1); !errors.Is(err, tiered.ErrInvalidRange) {
		t.Fatalf("negative offset: %v", err)
	}
	if err := b.Put(ctx, "x", bytes.NewReader(nil), -1); err == nil {
		t.Fatal("negative size accepted")
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.Stat(canceled, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("stat with a canceled context: %v", err)
	}
	if len(d.calls) != 0 {
		t.Fatalf("calls reached the driver: %q", d.calls)
	}
	// A range the driver opened but the rule refuses is closed.
	if _, err := b.GetRange(ctx, "x", 10, 1); !errors.Is(err, tiered.ErrInvalidRange) {
		t.Fatalf("range at the end: %v", err)
	}
	if d.opened != 0 {
		t.Fatalf("%d readers of refused ranges left open", d.opened)
	}
	// The driver's native errors come back as the sentinels.
	if _, err := b.Get(ctx, "missing"); !errors.Is(err, tiered.ErrNotFound) || !strings.Contains(err.Error(), "fake: get missing") {
		t.Fatalf("get missing: %v", err)
	}
	if err := b.Delete(ctx, "gone"); err != nil {
		t.Fatalf("delete of a missing object: %v", err)
	}
	info, err := b.Stat(ctx, "x")
	if err != nil || info.Name != "x" {
		t.Fatalf("stat names the object asked for: %+v, %v", info, err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if d.closed != 1 {
		t.Fatalf("driver closed %d times", d.closed)
	}
	if _, err := b.Stat(ctx, "x"); !errors.Is(err, tiered.ErrClosed) {
		t.Fatalf("stat after close: %v", err)
	}
}

func TestBucketPutReadsExactlySize(t *testing.T) {
	d := &fakeDriver{}
	b := tiered.New(d)
	ctx := context.Background()
	if err := b.Put(ctx, "x", strings.NewReader("abcdef"), 3); err == nil || !bytes.Equal(d.putSeen, []byte("abc")) {
		t.Fatalf("longer reader: %v, driver saw %q", err, d.putSeen)
	}
	if err := b.Put(ctx, "x", strings.NewReader("ab"), 3); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("shorter reader: %v", err)
	}
	if err := b.Put(ctx, "x", strings.NewReader("abc"), 3); err != nil || string(d.putSeen) != "abc" {
		t.Fatalf("exact reader: %v, driver saw %q", err, d.putSeen)
	}
}

func TestBucketListPages(t *testing.T) {
	d := &fakeDriver{list: []tiered.ObjectInfo{{Name: "p/e"}, {Name: "p/a"}, {Name: "p/d"}, {Name: "p/c"}, {Name: "p/b"}}}
	b := tiered.New(d)
	ctx := context.Background()
	page, err := b.List(ctx, "p/", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range page.Objects {
		got = append(got, o.Name)
	}
	if !slices.Equal(got, []string{"p/a", "p/b", "p/c"}) || page.Next != "p/c" {
		t.Fatalf("page %q next %q: want the first 3 (the driver's page size) sorted", got, page.Next)
	}
	d.list = append(d.list, tiered.ObjectInfo{Name: "q/outside"})
	if _, err := b.List(ctx, "p/", "", 0); err == nil {
		t.Fatal("a driver's object outside the prefix was passed on")
	}
	d.list = []tiered.ObjectInfo{{Name: "p/a"}}
	if _, err := b.List(ctx, "p/", "p/a", 0); err == nil {
		t.Fatal("a driver's object at startAfter was passed on")
	}
}
