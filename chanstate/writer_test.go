package chanstate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/metered"
)

func task(i int) backend.TaskID { return backend.TaskID{Job: "j", Operator: "op", Subtask: i} }

func in(gate, index int32) backend.ChannelID {
	return backend.ChannelID{Direction: backend.ChannelInput, Gate: gate, Index: index}
}

func newWriter(t testing.TB, store tiered.Store, maxBytes int64) *Writer {
	t.Helper()
	w, err := NewWriter(WriterOptions{Store: store, Dir: "j/chk-7", Name: "channels-d1", MaxObjectBytes: maxBytes, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func testBuffers(task, ch int) [][]Record {
	var out [][]Record
	for b := range 3 {
		var buf []Record
		for r := range 4 {
			buf = append(buf, Record{KeyGroup: int32((task*7 + ch*3 + b + r) % 128), Data: fmt.Appendf(nil, "t%d c%d b%d r%d", task, ch, b, r)})
		}
		out = append(out, buf)
	}
	return out
}

type appended struct {
	task    int
	ch      int
	seg     backend.ChannelSegment
	buffers [][]Record
}

// appendAll appends testBuffers of tasks x channels, one goroutine per
// task, and returns what each Append returned.
func appendAll(t *testing.T, w *Writer, tasks, channels int) []appended {
	t.Helper()
	var mu sync.Mutex
	var out []appended
	var wg sync.WaitGroup
	errs := make(chan error, tasks*channels)
	for ti := range tasks {
		wg.Go(func() {
			for c := range channels {
				b := testBuffers(ti, c)
				s, err := w.Append(context.Background(), task(ti), in(0, int32(c)), backend.ChannelKeyed, b)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				out = append(out, appended{ti, c, s, b})
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return out
}

func TestWriterOneObjectPerSeal(t *testing.T) {
	store := metered.New(memstore.New())
	w := newWriter(t, store, 0)
	got := appendAll(t, w, 16, 4)
	if c := store.Counts(); c.Calls[tiered.OpPut]+c.Calls[tiered.OpPutIfAbsent] != 0 {
		t.Fatalf("appends uploaded before Seal: %+v", c.Calls)
	}
	if err := w.Seal(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := store.Counts()
	if puts := c.Calls[tiered.OpPut] + c.Calls[tiered.OpPutIfAbsent]; puts != 1 {
		t.Fatalf("%d puts for 16 tasks x 4 channels, want 1", puts)
	}
	if objs := w.Objects(); len(objs) != 1 || objs[0] != "j/chk-7/channels-d1-0" {
		t.Fatalf("objects %v", objs)
	}
	st := w.Stats()
	if st.Objects != 1 || st.Segments != 64 || st.Bytes != int64(c.BytesUp) {
		t.Fatalf("stats %+v, counts %+v", st, c)
	}
	for _, a := range got {
		if a.seg.Path != "j/chk-7/channels-d1-0" {
			t.Fatalf("segment in %s", a.seg.Path)
		}
		checkRead(t, store, a)
	}
	// A second Seal with nothing new uploads nothing.
	if err := w.Seal(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c2 := store.Counts(); c2.Calls[tiered.OpPutIfAbsent] != c.Calls[tiered.OpPutIfAbsent] {
		t.Fatal("an empty Seal uploaded")
	}
}

func checkRead(t *testing.T, store tiered.Store, a appended) {
	t.Helper()
	cs := backend.ChannelState{Channel: in(0, int32(a.ch)), Kind: backend.ChannelKeyed}
	AddSegment(&cs, a.seg, a.buffers)
	var back [][]Record
	err := ReadChannel(context.Background(), store, cs, 128, func(b []Record) error {
		back = append(back, b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !equalBuffers(back, a.buffers) {
		t.Fatalf("task %d channel %d: read %v, want %v", a.task, a.ch, back, a.buffers)
	}
}

func TestWriterSplitsParts(t *testing.T) {
	store := metered.New(memstore.New())
	segLen := int64(len(EncodeSegment(testBuffers(0, 0))))
	// Room for about three segments a part.
	w := newWriter(t, store, 3*segLen+segLen/2)
	got := appendAll(t, w, 8, 4)
	if err := w.Seal(context.Background()); err != nil {
		t.Fatal(err)
	}
	objs := w.Objects()
	if len(objs) < 8 {
		t.Fatalf("%d objects for 32 segments of about a third of the bound each", len(objs))
	}
	if n := store.Counts().Calls[tiered.OpPutIfAbsent]; n != uint64(len(objs)) {
		t.Fatalf("%d puts for %d objects", n, len(objs))
	}
	// Each segment lies in exactly one part, inside it, and no two overlap.
	sizes := map[string]int64{}
	for _, o := range objs {
		info, err := store.Stat(context.Background(), o)
		if err != nil {
			t.Fatal(err)
		}
		if info.Size > w.o.MaxObjectBytes {
			t.Fatalf("%s has %d bytes, over the bound %d", o, info.Size, w.o.MaxObjectBytes)
		}
		sizes[o] = info.Size
	}
	covered := map[string]int64{}
	for _, a := range got {
		size, ok := sizes[a.seg.Path]
		if !ok || a.seg.Offset+a.seg.Length > size {
			t.Fatalf("segment %+v not inside an uploaded part", a.seg)
		}
		covered[a.seg.Path] += a.seg.Length
		checkRead(t, store, a)
	}
	for o, size := range sizes {
		if covered[o] != size {
			t.Fatalf("%s: segments cover %d of %d bytes (overlap or gap)", o, covered[o], size)
		}
	}
}

func TestWriterBigSegmentOwnPart(t *testing.T) {
	store := memstore.New()
	w := newWriter(t, store, 10)
	a, err := w.Append(context.Background(), task(0), in(0, 0), backend.ChannelKeyed, testBuffers(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.Append(context.Background(), task(0), in(0, 1), backend.ChannelKeyed, testBuffers(0, 1))
	if err != nil {
		t.Fatal(err)
	}
	if a.Path == b.Path || a.Offset != 0 || b.Offset != 0 {
		t.Fatalf("segments over the bound share a part: %+v %+v", a, b)
	}
	// The first part was uploaded by the second Append.
	if objs := w.Objects(); len(objs) != 1 || objs[0] != a.Path {
		t.Fatalf("objects %v", objs)
	}
}

// failOnce fails the first PutIfAbsent after putting the object, like a
// store whose answer was lost.
type failOnce struct {
	tiered.Store
	mu     sync.Mutex
	failed bool
}

func (f *failOnce) PutIfAbsent(ctx context.Context, name string, r io.Reader, size int64) error {
	err := f.Store.PutIfAbsent(ctx, name, r, size)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.failed {
		f.failed = true
		return errors.New("connection reset")
	}
	return err
}

func TestWriterSealRetries(t *testing.T) {
	store := &failOnce{Store: memstore.New()}
	w := newWriter(t, store, 0)
	a, err := w.Append(context.Background(), task(0), in(0, 0), backend.ChannelKeyed, testBuffers(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Seal(context.Background()); err == nil || !strings.Contains(err.Error(), "connection reset") {
		t.Fatalf("first Seal: %v", err)
	}
	if len(w.Objects()) != 0 {
		t.Fatal("a failed upload counted")
	}
	// The retry finds the object the lost attempt put, with our size.
	if err := w.Seal(context.Background()); err != nil {
		t.Fatal(err)
	}
	if objs := w.Objects(); len(objs) != 1 || objs[0] != a.Path {
		t.Fatalf("objects %v", objs)
	}
	checkRead(t, store, appended{0, 0, a, testBuffers(0, 0)})
}

func TestWriterNameCollision(t *testing.T) {
	store := memstore.New()
	if err := store.Put(context.Background(), "j/chk-7/channels-d1-0", strings.NewReader("other"), 5); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, store, 0)
	if _, err := w.Append(context.Background(), task(0), in(0, 0), backend.ChannelKeyed, testBuffers(0, 0)); err != nil {
		t.Fatal(err)
	}
	if err := w.Seal(context.Background()); !errors.Is(err, tiered.ErrExists) {
		t.Fatalf("Seal over another writer's object: %v", err)
	}
}

func TestWriterConcurrentSeals(t *testing.T) {
	store := metered.New(memstore.New())
	w := newWriter(t, store, 0)
	got := appendAll(t, w, 4, 4)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if err := w.Seal(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if n := store.Counts().Calls[tiered.OpPutIfAbsent]; n != 1 {
		t.Fatalf("8 concurrent Seals put %d times", n)
	}
	for _, a := range got {
		checkRead(t, store, a)
	}
}

func TestWriterAppendSealRace(t *testing.T) {
	// Seals interleaved with appends: every segment appended before a
	// Seal returned is readable after it.
	store := memstore.New()
	w := newWriter(t, store, 200)
	var wg sync.WaitGroup
	for ti := range 4 {
		wg.Go(func() {
			for c := range 8 {
				b := testBuffers(ti, c)
				s, err := w.Append(context.Background(), task(ti), in(0, int32(c)), backend.ChannelKeyed, b)
				if err != nil {
					t.Error(err)
					return
				}
				if err := w.Seal(context.Background()); err != nil {
					t.Error(err)
					return
				}
				checkRead(t, store, appended{ti, c, s, b})
			}
		})
	}
	wg.Wait()
}

func TestWriterCloseRemovesSpool(t *testing.T) {
	spool := t.TempDir()
	store := memstore.New()
	w, err := NewWriter(WriterOptions{Store: store, Name: "c", MaxObjectBytes: 100, SpoolDir: spool})
	if err != nil {
		t.Fatal(err)
	}
	for c := range 3 {
		if _, err := w.Append(context.Background(), task(0), in(0, int32(c)), backend.ChannelKeyed, testBuffers(0, c)); err != nil {
			t.Fatal(err)
		}
	}
	if ents, _ := os.ReadDir(spool); len(ents) == 0 {
		t.Fatal("no spool file while a part is open")
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if ents, _ := os.ReadDir(spool); len(ents) != 0 {
		t.Fatalf("spool files left: %v", ents)
	}
	if objs := w.Objects(); len(objs) != 2 {
		t.Fatalf("objects %v: the two full parts stay uploaded", objs)
	}
	if _, err := w.Append(context.Background(), task(0), in(0, 0), backend.ChannelKeyed, nil); !errors.Is(err, ErrWriterClosed) {
		t.Fatalf("Append after Close: %v", err)
	}
	if err := w.Seal(context.Background()); !errors.Is(err, ErrWriterClosed) {
		t.Fatalf("Seal after Close: %v", err)
	}
}

func TestWriterRefusesBadInput(t *testing.T) {
	w := newWriter(t, memstore.New(), 0)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		ch   backend.ChannelID
		kind backend.ChannelKind
		buf  [][]Record
	}{
		{"bad direction", backend.ChannelID{Direction: "sideways"}, backend.ChannelKeyed, nil},
		{"negative index", in(0, -1), backend.ChannelKeyed, nil},
		{"bad kind", in(0, 0), "hashed", nil},
		{"negative key group", in(0, 0), backend.ChannelKeyed, [][]Record{{{KeyGroup: -2}}}},
		{"key group on forward", in(0, 0), backend.ChannelForward, [][]Record{{{KeyGroup: 2}}}},
	} {
		if _, err := w.Append(ctx, task(0), tc.ch, tc.kind, tc.buf); !errors.Is(err, backend.ErrInvalidArgument) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
	for _, o := range []WriterOptions{{}, {Store: memstore.New()}, {Store: memstore.New(), Name: "x", Dir: "/abs"}, {Store: memstore.New(), Name: "x", MaxObjectBytes: -1}} {
		if _, err := NewWriter(o); !errors.Is(err, backend.ErrInvalidArgument) {
			t.Errorf("NewWriter(%+v): %v", o, err)
		}
	}
}

// TestWriterAppendFile: files appended as they are share the parts with
// segments; each ref locates the file's exact bytes with its CRC32C, and
// one Seal uploads them all as one object.
func TestWriterAppendFile(t *testing.T) {
	store := metered.New(memstore.New())
	w := newWriter(t, store, 0)
	ctx := context.Background()
	files := [][]byte{[]byte("first file"), bytes.Repeat([]byte{7}, 1000), []byte("x")}
	var refs []backend.ChannelSegment
	for _, f := range files {
		ref, err := w.AppendFile(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, ref)
	}
	if err := w.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	if n := store.Counts().Calls[tiered.OpPutIfAbsent] + store.Counts().Calls[tiered.OpPut]; n != 1 {
		t.Fatalf("%d puts for three files, want 1", n)
	}
	for i, ref := range refs {
		if ref.Path != refs[0].Path {
			t.Fatalf("file %d in %s, file 0 in %s", i, ref.Path, refs[0].Path)
		}
		rc, err := store.GetRange(ctx, ref.Path, ref.Offset, ref.Length)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, files[i]) {
			t.Fatalf("file %d read back %q %v", i, got, err)
		}
		if ref.CRC32C != crc32.Checksum(files[i], crc32.MakeTable(crc32.Castagnoli)) {
			t.Fatalf("file %d: crc %08x is not the file's", i, ref.CRC32C)
		}
	}
}

// TestWriterAppendFileFrom: a file streamed from a reader, larger than
// AppendFile's bound, lies in the same object as the small ones with its
// exact bytes and CRC32C; a reader with fewer or more bytes than said
// fails and leaves nothing behind (the next file lies where it would
// have).
func TestWriterAppendFileFrom(t *testing.T) {
	store := metered.New(memstore.New())
	w := newWriter(t, store, 1<<40)
	ctx := context.Background()
	big := make([]byte, MaxSegmentBytes+4096)
	for i := range big {
		big[i] = byte(i * 7)
	}
	small := []byte("small file")
	r1, err := w.AppendFile(ctx, small)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.AppendFileFrom(ctx, bytes.NewReader(small[:4]), int64(len(small))); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("a short reader: %v, want ErrInvalidArgument", err)
	}
	if _, err := w.AppendFileFrom(ctx, bytes.NewReader(small), 3); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("a long reader: %v, want ErrInvalidArgument", err)
	}
	r2, err := w.AppendFileFrom(ctx, bytes.NewReader(big), int64(len(big)))
	if err != nil {
		t.Fatal(err)
	}
	if r2.Path != r1.Path || r2.Offset != int64(len(small)) || r2.Length != int64(len(big)) {
		t.Fatalf("big file at %+v, small at %+v", r2, r1)
	}
	if r2.CRC32C != crc32.Checksum(big, crc32.MakeTable(crc32.Castagnoli)) {
		t.Fatalf("crc %08x is not the file's", r2.CRC32C)
	}
	if err := w.Seal(ctx); err != nil {
		t.Fatal(err)
	}
	if n := store.Counts().Calls[tiered.OpPutIfAbsent] + store.Counts().Calls[tiered.OpPut]; n != 1 {
		t.Fatalf("%d puts for two files, want 1", n)
	}
	rc, err := store.GetRange(ctx, r2.Path, r2.Offset, r2.Length)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("big file read back %d bytes (%v), not its own", len(got), err)
	}
}
