package fuzz

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/chanstate"
	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/dstl/changelog"
	"github.com/statedhq/stated/internal/frame"
)

// update regenerates testdata/pinned. Only for a new format version: keep
// the files of the old version (move them to a directory named after it)
// and add a test that still reads them.
var update = flag.Bool("update", false, "regenerate the pinned format files in testdata/pinned")

const pinnedDir = "testdata/pinned"

// The pinned files (under pinnedDir):
//
//	frame.bin                  internal/frame envelope of pinnedPayload
//	handle.bin                 backend.EncodeHandle(pinnedHandle())
//	handle-changelog.bin       backend.EncodeHandle(pinnedChangelogHandle()), version 2
//	handle-channels.bin        backend.EncodeHandle(pinnedChannelsHandle()), version 3
//	handle-remote.bin          backend.EncodeHandle(pinnedRemoteHandle()), version 4
//	batch-request.bin          pb.BatchRequest pinnedBatchRequest(), deterministic protobuf
//	batch-response.bin         pb.BatchResponse pinnedBatchResponse()
//	segment.bin                dstl segment of pinnedChanges() (two writers), uncompressed
//	segment-zstd.bin           the same, zstd-compressed blocks
//	channel-segment.bin        chanstate segment of pinnedChannelBuffers(), version 1
//	checkpoints/<kind>/root/   a checkpoint root: job file, checkpoints 1 and 2, a native
//	                           and a canonical savepoint (the fixture of kind, aligned)
//	checkpoints/heap/heap/     the heap snapshot store (daemon memory) of the heap fixture
//	checkpoints/unaligned-<kind>/
//	                           the same with unaligned checkpoints: channel state objects
//	                           and version 3 handles with channels and statistics
const (
	pinnedMagic   = "PINx"
	pinnedVersion = 7
)

var pinnedPayload = []byte("stated pinned frame payload\x00\xff")

// pinnedHandle has every field of a handle set.
func pinnedHandle() *backend.Handle {
	return &backend.Handle{
		Version: backend.HandleVersionBase, Backend: backend.KindLSM,
		Task:         backend.TaskID{Job: "j", Operator: "op", Subtask: 1},
		CheckpointID: 42, KeyGroups: backend.KeyGroupRange{Start: 4, End: 7}, MaxParallelism: 8,
		States: []backend.StateDescriptor{
			{Name: "a", Kind: backend.KindAggregate, Aggregate: backend.AggMax, Number: backend.NumFloat64},
			{Name: "v", Kind: backend.KindValue, TTL: 90 * time.Second, TTLUpdate: backend.TTLOnReadAndWrite},
		},
		Files: []backend.FileRef{
			{Path: "j/shared/0011-000004.sst", LocalName: "000004.sst", Size: 1234, CRC32C: 0xdeadbeef, Shared: true,
				KeyGroupBounds: &backend.KeyGroupRange{Start: 4, End: 6}},
			{Path: "j/chk-42/op-1/state-00ff", Size: 99, CRC32C: 7, KeyGroupOffsets: []int64{16, 20, 20, 50, 99}, Compression: "zstd"},
		},
		OperatorState: []backend.OperatorList{
			{Name: "bcast", Mode: backend.OperatorUnion, Elements: [][]byte{[]byte("u"), {}}},
			{Name: "offsets", Mode: backend.OperatorSplit},
		},
		FullSize: 1333, CheckpointedSize: 99,
	}
}

// pinnedChangelogHandle is a changelog-mode handle: version 2, with Log.
func pinnedChangelogHandle() *backend.Handle {
	return &backend.Handle{
		Version: backend.HandleVersionLog, Backend: backend.KindFile,
		Task:         backend.TaskID{Job: "j", Operator: "op", Subtask: 0},
		CheckpointID: 7, KeyGroups: backend.KeyGroupRange{Start: 0, End: 3}, MaxParallelism: 8,
		States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}},
		Files: []backend.FileRef{
			{Path: "j/shared/changelog/op-0-ab12-1/canonical-77", Size: 500, CRC32C: 0x1234, Shared: true,
				KeyGroupOffsets: []int64{8, 100, 200, 300, 500}},
			{Path: "j/chk-7/op-0/_changelog", Size: 321, CRC32C: 0x4321},
		},
		FullSize: 821, CheckpointedSize: 321,
		Log: &backend.HandleLog{Segments: []string{"_changelog/shared/r1/0000000000000003-0", "_changelog/shared/r1/0000000000000004-1"}, Bytes: 4096},
	}
}

// pinnedChannelsHandle is an unaligned checkpoint's handle: version 3, with
// channel state (every kind, several segments) and statistics.
func pinnedChannelsHandle() *backend.Handle {
	return &backend.Handle{
		Version: backend.HandleVersionChannels, Backend: backend.KindHeap,
		Task:         backend.TaskID{Job: "j", Operator: "op", Subtask: 1},
		CheckpointID: 9, KeyGroups: backend.KeyGroupRange{Start: 4, End: 7}, MaxParallelism: 8,
		States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}},
		Files:  []backend.FileRef{{Path: "j/chk-9/op-1/state-00aa", Size: 77, CRC32C: 0xabcd, KeyGroupOffsets: []int64{16, 30, 40, 50, 77}}},
		Channels: []backend.ChannelState{
			{Channel: backend.ChannelID{Direction: backend.ChannelInput, Gate: 0, Index: 2}, Kind: backend.ChannelKeyed,
				Segments: []backend.ChannelSegment{
					{Path: "j/chk-9/channels-0123abcd-0", Offset: 0, Length: 40, CRC32C: 0x11223344},
					{Path: "j/chk-9/channels-0123abcd-1", Offset: 12, Length: 30, CRC32C: 0x55667788},
				}, Buffers: 3, Records: 7, Bytes: 41},
			{Channel: backend.ChannelID{Direction: backend.ChannelInput, Gate: 1, Index: 0}, Kind: backend.ChannelForward,
				Segments: []backend.ChannelSegment{{Path: "j/chk-9/channels-0123abcd-0", Offset: 40, Length: 21, CRC32C: 9}},
				Buffers:  1, Records: 1, Bytes: 5},
			{Channel: backend.ChannelID{Direction: backend.ChannelOutput, Gate: 0, Index: 3}, Kind: backend.ChannelBroadcast,
				Segments: []backend.ChannelSegment{{Path: "j/chk-9/channels-0123abcd-1", Offset: 0, Length: 12, CRC32C: 0xffffffff}},
				Buffers:  1, Records: 0, Bytes: 0},
		},
		Stats:    &backend.TaskStats{Unaligned: true, AlignmentMicros: 1500, StartDelayMicros: 250, SyncMicros: 80, AsyncMicros: 12000},
		FullSize: 77, CheckpointedSize: 77,
	}
}

// pinnedRemoteHandle is an lsm remote-mode handle: version 4, with SSTs
// referenced in place (size only, table bounds) next to a private file.
func pinnedRemoteHandle() *backend.Handle {
	return &backend.Handle{
		Version: backend.HandleVersionRemote, Backend: backend.KindLSM,
		Task:         backend.TaskID{Job: "j", Operator: "op", Subtask: 0},
		CheckpointID: 11, KeyGroups: backend.KeyGroupRange{Start: 0, End: 3}, MaxParallelism: 8,
		States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}},
		Files: []backend.FileRef{
			{Path: "j/shared/lsm/01ab-77-000005.sst", Size: 2048, Shared: true, SizeOnly: true,
				KeyGroupBounds: &backend.KeyGroupRange{Start: 0, End: 2},
				Table:          &backend.TableRef{Level: 6, Smallest: []byte{0, 0, 'a'}, Largest: []byte{0, 2, 0xff}, SmallestSeq: 3, LargestSeq: 9}},
			{Path: "j/shared/lsm/02cd-77-000009.sst", Size: 512, Shared: true, SizeOnly: true,
				KeyGroupBounds: &backend.KeyGroupRange{Start: 1, End: 1},
				Table:          &backend.TableRef{Level: 0, Smallest: []byte{0, 1, 'k'}, Largest: []byte{0, 1, 'k'}, SmallestSeq: 12, LargestSeq: 12}},
		},
		FullSize: 2560, CheckpointedSize: 0,
	}
}

// pinnedChannelBuffers are the buffers of channel-segment.bin: records of
// several key groups, an empty record and an empty buffer.
func pinnedChannelBuffers() [][]chanstate.Record {
	return [][]chanstate.Record{
		{{KeyGroup: 0, Data: []byte("first")}, {KeyGroup: 7, Data: []byte{0, 0xff, 0x80}}},
		{},
		{{KeyGroup: 3, Data: []byte{}}, {KeyGroup: 5, Data: bytes.Repeat([]byte("x"), 200)}},
	}
}

func pinnedBatchRequest() *pb.BatchRequest {
	r := &pb.BatchRequest{InstanceId: []byte{1, 2, 3, 4}, Job: "j", Seq: 9}
	for t := pb.OpType_OP_TYPE_GET; t <= pb.OpType_OP_TYPE_OPERATOR_GET; t++ {
		r.Ops = append(r.Ops, &pb.Op{Type: t, State: "s" + t.String()[8:], KeyGroup: uint32(t), Key: []byte("key"),
			Namespace: []byte{byte(t)}, UserKey: []byte("uk"), Value: []byte("value"), Values: [][]byte{[]byte("a"), {}},
			NumberType: pb.NumberType_NUMBER_TYPE_FLOAT64, IntValue: -int64(t), FloatValue: 1.5, Timestamp: math.MaxInt64 - int64(t),
			Limit: int32(t), OperatorMode: pb.OperatorStateMode_OPERATOR_STATE_MODE_UNION})
	}
	return r
}

func pinnedBatchResponse() *pb.BatchResponse {
	return &pb.BatchResponse{Seq: 9, Results: []*pb.Result{
		{Code: 5, Error: "not found: state x", Index: 0},
		{Found: true, Value: []byte("v"), Index: 1},
		{Values: [][]byte{[]byte("a"), []byte("b")}, Index: 2},
		{Entries: []*pb.MapEntry{{UserKey: []byte("k"), Value: []byte("v")}}, More: true, Index: 3},
		{Found: true, NumberType: pb.NumberType_NUMBER_TYPE_INT64, IntValue: -3, FloatValue: 2.25, Index: 4},
		{Timers: []*pb.Timer{{KeyGroup: 3, Key: []byte("k"), Namespace: []byte("n"), Timestamp: -1}}, Index: 5},
		{Found: true, Values: [][]byte{[]byte("e")}, OperatorMode: pb.OperatorStateMode_OPERATOR_STATE_MODE_SPLIT, Index: 6},
	}}
}

// pinnedChange is one change record as a writer logs it.
type pinnedChange struct {
	writer string
	seq    uint64
	c      changelog.Change
}

// pinnedChanges has a change of every op, over two writers.
func pinnedChanges() []pinnedChange {
	k := backend.Key{KeyGroup: 5, Key: []byte("key"), Namespace: []byte("ns")}
	cs := []changelog.Change{
		{Op: changelog.OpRegister, Time: 1, Desc: backend.StateDescriptor{Name: "a", Kind: backend.KindAggregate,
			TTL: time.Minute, TTLUpdate: backend.TTLOnReadAndWrite, Aggregate: backend.AggSum, Number: backend.NumInt64}},
		{Op: changelog.OpPut, Time: 2, State: "v", Key: k, Values: [][]byte{[]byte("value")}},
		{Op: changelog.OpDelete, Time: 3, State: "v", Key: k},
		{Op: changelog.OpListAppend, Time: 4, State: "l", Key: k, Values: [][]byte{[]byte("e0"), []byte("e1")}},
		{Op: changelog.OpMapPut, Time: 5, State: "m", Key: k, UserKey: []byte("uk"), Value: []byte("mv")},
		{Op: changelog.OpMapRemove, Time: 6, State: "m", Key: k, UserKey: []byte("uk")},
		{Op: changelog.OpAggregate, Time: 7, State: "a", Key: k, Number: backend.Int64(-12)},
		{Op: changelog.OpTimerAdd, Time: 8, State: "t", Timer: backend.Timer{KeyGroup: 5, Key: []byte("key"), Namespace: []byte("ns"), Timestamp: 1000}},
		{Op: changelog.OpTimerDelete, Time: 9, State: "t", Timer: backend.Timer{KeyGroup: 5, Key: []byte("key"), Timestamp: 1000}},
		{Op: changelog.OpGet, Time: 10, State: "v", Key: k},
		{Op: changelog.OpListGet, Time: 11, State: "l", Key: k},
		{Op: changelog.OpMapGet, Time: 12, State: "m", Key: k, UserKey: []byte("uk")},
		{Op: changelog.OpMapIterate, Time: 13, State: "m", Key: k, After: []byte("a"), HasAfter: true, Limit: 10},
		{Op: changelog.OpAggGet, Time: 14, State: "a", Key: k},
	}
	var out []pinnedChange
	for i, c := range cs {
		w := "op-0"
		if i%3 == 2 {
			w = "op-1"
		}
		out = append(out, pinnedChange{writer: w, c: c})
	}
	seqs := map[string]uint64{}
	for i := range out {
		seqs[out[i].writer]++
		out[i].seq = seqs[out[i].writer]
	}
	return out
}

func encodeSegment(compress bool) ([]byte, error) {
	b := dstl.NewSegmentBuilder(0, compress)
	for _, p := range pinnedChanges() {
		if err := b.Add(p.writer, p.seq, p.c.KeyGroup(), p.c.Encode(nil)); err != nil {
			return nil, err
		}
	}
	seg, _, err := b.Encode()
	return seg, err
}

// pinnedRoot is one pinned checkpoint root: the fixture of kind, with
// channel state or without, in checkpoints/<dir>.
type pinnedRoot struct {
	dir      string
	kind     backend.Kind
	channels bool
}

func pinnedRoots() []pinnedRoot {
	var out []pinnedRoot
	for _, kind := range kinds {
		out = append(out, pinnedRoot{string(kind), kind, false}, pinnedRoot{"unaligned-" + string(kind), kind, true})
	}
	return out
}

// generatePinned writes every pinned file from the models above and the
// fixtures.
func generatePinned(t *testing.T) {
	if err := os.RemoveAll(pinnedDir); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"frame.bin": frame.Encode(pinnedMagic, pinnedVersion, pinnedPayload)}
	var err error
	if files["handle.bin"], err = backend.EncodeHandle(pinnedHandle()); err != nil {
		t.Fatal(err)
	}
	if files["handle-changelog.bin"], err = backend.EncodeHandle(pinnedChangelogHandle()); err != nil {
		t.Fatal(err)
	}
	if files["handle-channels.bin"], err = backend.EncodeHandle(pinnedChannelsHandle()); err != nil {
		t.Fatal(err)
	}
	if files["handle-remote.bin"], err = backend.EncodeHandle(pinnedRemoteHandle()); err != nil {
		t.Fatal(err)
	}
	files["channel-segment.bin"] = chanstate.EncodeSegment(pinnedChannelBuffers())
	det := proto.MarshalOptions{Deterministic: true}
	if files["batch-request.bin"], err = det.Marshal(pinnedBatchRequest()); err != nil {
		t.Fatal(err)
	}
	if files["batch-response.bin"], err = det.Marshal(pinnedBatchResponse()); err != nil {
		t.Fatal(err)
	}
	if files["segment.bin"], err = encodeSegment(false); err != nil {
		t.Fatal(err)
	}
	if files["segment-zstd.bin"], err = encodeSegment(true); err != nil {
		t.Fatal(err)
	}
	for _, pr := range pinnedRoots() {
		f, err := buildFixture(pr.kind, pr.channels)
		if err != nil {
			t.Fatal(err)
		}
		for name, b := range f.objects {
			p := filepath.Join("checkpoints", pr.dir, "root", filepath.FromSlash(name))
			if n, ok := strings.CutPrefix(name, heapPrefix); ok {
				p = filepath.Join("checkpoints", pr.dir, "heap", filepath.FromSlash(n))
			}
			files[p] = b
		}
	}
	total := 0
	for p, b := range files {
		p = filepath.Join(pinnedDir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		total += len(b)
	}
	t.Logf("wrote %d pinned files, %d bytes", len(files), total)
}

func readPinned(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pinnedDir, name))
	if err != nil {
		t.Fatalf("pinned file: %v (regenerate with -update only for a new format version)", err)
	}
	return b
}

// sameAtVersion fails when this build, writing the same format version as
// the pinned file, writes other bytes for the same content: a format
// change without a new version.
func sameAtVersion(t *testing.T, what string, pinned, now []byte, pinnedVersion, currentVersion int) {
	t.Helper()
	if pinnedVersion == currentVersion && !bytes.Equal(pinned, now) {
		t.Errorf("%s: this build writes version %d differently from the pinned file (%d vs %d bytes): a format change needs a new version",
			what, currentVersion, len(now), len(pinned))
	}
}

// TestPinned decodes every pinned file and checks its content field by
// field against the model that generated it; the checkpoint roots are
// restored through the daemon, every source of each. Run with -update to
// regenerate (see update).
func TestPinned(t *testing.T) {
	if *update {
		generatePinned(t)
	}
	t.Run("frame", func(t *testing.T) {
		b := readPinned(t, "frame.bin")
		v, payload, err := frame.Decode(pinnedMagic, b)
		if err != nil || v != pinnedVersion || !bytes.Equal(payload, pinnedPayload) {
			t.Fatalf("frame: version %d payload %q, %v", v, payload, err)
		}
		sameAtVersion(t, "frame", b, frame.Encode(pinnedMagic, pinnedVersion, pinnedPayload), 0, 0)
	})
	t.Run("handle", func(t *testing.T) {
		b := readPinned(t, "handle.bin")
		h, err := backend.DecodeHandle(b)
		if err != nil {
			t.Fatal(err)
		}
		want := pinnedHandle()
		compareFields(t, "handle", reflect.ValueOf(*h), reflect.ValueOf(*want))
		now, err := backend.EncodeHandle(want)
		if err != nil {
			t.Fatal(err)
		}
		sameAtVersion(t, "handle", b, now, h.Version, backend.HandleVersionBase)
	})
	t.Run("handle-changelog", func(t *testing.T) {
		b := readPinned(t, "handle-changelog.bin")
		h, err := backend.DecodeHandle(b)
		if err != nil {
			t.Fatal(err)
		}
		want := pinnedChangelogHandle()
		compareFields(t, "changelog handle", reflect.ValueOf(*h), reflect.ValueOf(*want))
		now, err := backend.EncodeHandle(want)
		if err != nil {
			t.Fatal(err)
		}
		sameAtVersion(t, "changelog handle", b, now, h.Version, backend.HandleVersionLog)
	})
	t.Run("handle-channels", func(t *testing.T) {
		b := readPinned(t, "handle-channels.bin")
		h, err := backend.DecodeHandle(b)
		if err != nil {
			t.Fatal(err)
		}
		want := pinnedChannelsHandle()
		compareFields(t, "channels handle", reflect.ValueOf(*h), reflect.ValueOf(*want))
		now, err := backend.EncodeHandle(want)
		if err != nil {
			t.Fatal(err)
		}
		sameAtVersion(t, "channels handle", b, now, h.Version, backend.HandleVersionChannels)
	})
	t.Run("handle-remote", func(t *testing.T) {
		b := readPinned(t, "handle-remote.bin")
		h, err := backend.DecodeHandle(b)
		if err != nil {
			t.Fatal(err)
		}
		want := pinnedRemoteHandle()
		compareFields(t, "remote handle", reflect.ValueOf(*h), reflect.ValueOf(*want))
		now, err := backend.EncodeHandle(want)
		if err != nil {
			t.Fatal(err)
		}
		sameAtVersion(t, "remote handle", b, now, h.Version, backend.HandleVersionRemote)
	})
	t.Run("channel-segment", func(t *testing.T) {
		b := readPinned(t, "channel-segment.bin")
		got, err := chanstate.DecodeSegment(b, backend.ChannelKeyed, maxPar)
		if err != nil {
			t.Fatal(err)
		}
		want := pinnedChannelBuffers()
		if len(got) != len(want) {
			t.Fatalf("%d buffers, want %d", len(got), len(want))
		}
		for i := range want {
			compareFields(t, fmt.Sprintf("channel segment buffer %d", i), reflect.ValueOf(got[i]), reflect.ValueOf(want[i]))
		}
		v, _, err := frame.Decode(chanstate.SegmentMagic, b)
		if err != nil {
			t.Fatal(err)
		}
		sameAtVersion(t, "channel segment", b, chanstate.EncodeSegment(want), int(v), int(chanstate.SegmentVersion))
	})
	t.Run("batch", func(t *testing.T) {
		for name, want := range map[string]proto.Message{"batch-request.bin": pinnedBatchRequest(), "batch-response.bin": pinnedBatchResponse()} {
			b := readPinned(t, name)
			got := want.ProtoReflect().New().Interface()
			if err := proto.Unmarshal(b, got); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if !proto.Equal(got, want) {
				t.Errorf("%s decodes to\n%v\nwant\n%v", name, got, want)
			}
			if len(got.ProtoReflect().GetUnknown()) != 0 {
				t.Errorf("%s: fields this build does not know", name)
			}
			now, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			sameAtVersion(t, name, b, now, 0, 0)
		}
	})
	t.Run("segment", func(t *testing.T) {
		for _, name := range []string{"segment.bin", "segment-zstd.bin"} {
			b := readPinned(t, name)
			want := pinnedChanges()
			i := 0
			// DecodeSegment gives each writer's records in sequence order,
			// writers in id order.
			byWriter := map[string][]pinnedChange{}
			for _, p := range want {
				byWriter[p.writer] = append(byWriter[p.writer], p)
			}
			next := map[string]int{}
			_, err := dstl.DecodeSegment(name, b, func(w string, r dstl.Record) error {
				i++
				if next[w] >= len(byWriter[w]) {
					return fmt.Errorf("record %d of writer %s is one too many", r.Seq, w)
				}
				p := byWriter[w][next[w]]
				next[w]++
				if r.Seq != p.seq || r.KeyGroup != p.c.KeyGroup() {
					return fmt.Errorf("writer %s: record seq %d key group %d, want %d %d", w, r.Seq, r.KeyGroup, p.seq, p.c.KeyGroup())
				}
				c, err := changelog.DecodeChange(r.Change)
				if err != nil {
					return err
				}
				compareFields(t, fmt.Sprintf("%s: %s record %d", name, w, r.Seq), reflect.ValueOf(*c), reflect.ValueOf(p.c))
				sameAtVersion(t, fmt.Sprintf("change %s/%d", w, r.Seq), r.Change, p.c.Encode(nil), int(r.Change[0]), changelog.ChangeVersion)
				return nil
			})
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if i != len(want) {
				t.Fatalf("%s: %d records, want %d", name, i, len(want))
			}
			if name == "segment.bin" {
				// zstd's output may change with the library; the
				// uncompressed encoding may not.
				now, err := encodeSegment(false)
				if err != nil {
					t.Fatal(err)
				}
				sameAtVersion(t, name, b, now, int(b[4]), dstl.Version)
			}
		}
	})
	for _, pr := range pinnedRoots() {
		t.Run(pr.dir, func(t *testing.T) {
			defer silence()()
			f := loadPinnedFixture(t, pr)
			checkPinnedMetadata(t, f)
			ctx := context.Background()
			root := scratchDir(t)
			for _, src := range sources(pr.kind) {
				if err := restore(ctx, root, f, f.objects, src); err != nil {
					t.Errorf("%s: %v", src, err)
				}
			}
		})
	}
	t.Run("size", func(t *testing.T) {
		total := int64(0)
		err := filepath.WalkDir(pinnedDir, func(_ string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			fi, err := e.Info()
			total += fi.Size()
			return err
		})
		if err != nil || total > 1<<20 {
			t.Fatalf("pinned files hold %d bytes (keep them under 1 MiB): %v", total, err)
		}
	})
}

// loadPinnedFixture reads the pinned checkpoint root pr.
func loadPinnedFixture(t *testing.T, pr pinnedRoot) *fixture {
	t.Helper()
	kind := pr.kind
	f := &fixture{kind: kind, channels: pr.channels, objects: map[string][]byte{}}
	dir := filepath.Join(pinnedDir, "checkpoints", pr.dir)
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		switch top, name, _ := strings.Cut(rel, "/"); top {
		case "root":
			f.objects[name] = b
		case "heap":
			f.objects[heapPrefix+name] = b
		default:
			return fmt.Errorf("unexpected pinned file %s", p)
		}
		return nil
	})
	if err != nil || len(f.objects) == 0 {
		t.Fatalf("pinned %s checkpoints: %d files, %v", kind, len(f.objects), err)
	}
	for name, b := range f.objects {
		rest, ok := strings.CutPrefix(name, catalog.SavepointsDir+"/")
		if !ok || !strings.HasSuffix(rest, "/"+catalog.ManifestName) {
			continue
		}
		m, err := catalog.DecodeManifest(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		switch m.Format {
		case catalog.FormatNative:
			f.native = m.SavepointID
		case catalog.FormatCanonical:
			f.canonical = m.SavepointID
		}
	}
	if f.native == "" || f.canonical == "" {
		t.Fatalf("pinned %s checkpoints: native savepoint %q, canonical %q", kind, f.native, f.canonical)
	}
	return f
}

// checkPinnedMetadata checks the manifests and the job file of a pinned
// root field by field, and that this build writes them byte for byte the
// same at the same version.
func checkPinnedMetadata(t *testing.T, f *fixture) {
	t.Helper()
	for name, b := range f.objects {
		if !strings.HasSuffix(name, "/"+catalog.ManifestName) {
			continue
		}
		m, err := catalog.DecodeManifest(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		wantKind, wantID, wantFormat, wantBackend := catalog.KindCheckpoint, uint64(0), catalog.Format(""), f.kind
		switch {
		case name == catalog.CheckpointManifest(job, 1):
			wantID = 1
		case name == catalog.CheckpointManifest(job, 2):
			wantID = 2
		case m.SavepointID == f.native:
			wantKind, wantID, wantFormat = catalog.KindSavepoint, 3, catalog.FormatNative
		case m.SavepointID == f.canonical:
			wantKind, wantID, wantFormat, wantBackend = catalog.KindSavepoint, 2, catalog.FormatCanonical, backend.KindFile
		default:
			t.Fatalf("unexpected manifest %s", name)
		}
		if m.Version != catalog.ManifestVersion || m.Kind != wantKind || m.Job != job || m.CheckpointID != wantID ||
			m.Format != wantFormat || !m.Started.Equal(epoch) || !m.Completed.Equal(epoch) || len(m.Tasks) != oldPar {
			t.Errorf("%s: version %d kind %s job %s checkpoint %d format %q started %s completed %s tasks %d",
				name, m.Version, m.Kind, m.Job, m.CheckpointID, m.Format, m.Started, m.Completed, len(m.Tasks))
		}
		var full int64
		for i, h := range m.Tasks {
			if h.Backend != wantBackend || h.Task != task(i) || h.CheckpointID != wantID || h.MaxParallelism != maxPar ||
				h.KeyGroups != backend.KeyGroupRangeForOperator(maxPar, oldPar, i) || !reflect.DeepEqual(h.States, states) ||
				len(h.OperatorState) != 2 || len(h.Files) == 0 {
				t.Errorf("%s: task %d: %+v", name, i, h)
			}
			checkPinnedChannels(t, name, h, f.channels && wantKind == catalog.KindCheckpoint)
			full += h.FullSize
		}
		if m.FullSize != full {
			t.Errorf("%s: full size %d, its tasks' %d", name, m.FullSize, full)
		}
		if m.Version == catalog.ManifestVersion {
			now, err := catalog.EncodeManifest(m)
			if err != nil {
				t.Fatal(err)
			}
			sameAtVersion(t, name, b, now, 0, 0)
		}
	}
	// The job file: catalog.Open reads it (the history of checkpoints 1
	// and 2, the native savepoint's released id 3 not in it).
	dir := scratchDir(t)
	e, err := openEnv(context.Background(), dir, f.objects)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	if p := e.cat.Problems(); len(p) != 0 {
		t.Fatalf("problems: %v", p)
	}
	recs := e.cat.List(job)
	if len(recs) != 2 {
		t.Fatalf("history %+v", recs)
	}
	for i, r := range recs {
		if r.ID != uint64(i+1) || r.Status != catalog.StatusCompleted || !r.Started.Equal(epoch) || !r.Ended.Equal(epoch) ||
			r.Tasks != oldPar || !r.Retained || r.Damaged != nil {
			t.Errorf("history record %d: %+v", i, r)
		}
	}
}

// checkPinnedChannels checks the channel state and statistics of a pinned
// handle: for an unaligned checkpoint (unaligned), version 3, the
// channels of channelsAt with their counts in segments of the
// checkpoint's own channel state objects, and the reported statistics;
// otherwise none of them.
func checkPinnedChannels(t *testing.T, manifest string, h *backend.Handle, unaligned bool) {
	t.Helper()
	if !unaligned {
		if len(h.Channels) != 0 || h.Stats != nil {
			t.Errorf("%s: task %s: channel state %+v, statistics %+v in an aligned checkpoint", manifest, h.Task, h.Channels, h.Stats)
		}
		return
	}
	st := h.Stats
	if h.Version != backend.HandleVersionChannels || st == nil || !st.Unaligned ||
		st.AlignmentMicros != snapshotStats.Alignment.Microseconds() || st.StartDelayMicros != snapshotStats.StartDelay.Microseconds() {
		t.Errorf("%s: task %s: handle version %d, statistics %+v", manifest, h.Task, h.Version, st)
	}
	want := channelsAt(int(h.CheckpointID), h.Task.Subtask)
	if len(h.Channels) != len(want) {
		t.Errorf("%s: task %s: %d channels, model %d", manifest, h.Task, len(h.Channels), len(want))
		return
	}
	dir := catalog.CheckpointDir(job, h.CheckpointID) + "/channels-"
	for i, cs := range h.Channels {
		w := want[i]
		nb, nr, nbytes := chanstate.Counts(w.buffers)
		if cs.Channel != w.id || cs.Kind != w.kind || cs.Buffers != nb || cs.Records != nr || cs.Bytes != nbytes || len(cs.Segments) != 2 {
			t.Errorf("%s: task %s channel %d: %+v, model %s (%s) %d/%d/%d in 2 segments", manifest, h.Task, i, cs, w.id, w.kind, nb, nr, nbytes)
		}
		for _, sg := range cs.Segments {
			if !strings.HasPrefix(sg.Path, dir) {
				t.Errorf("%s: task %s channel %s: segment in %s, not a channel state object of the checkpoint", manifest, h.Task, cs.Channel, sg.Path)
			}
		}
	}
}

// compareFields compares got and want field by field (recursively), and
// names the first field that differs.
func compareFields(t *testing.T, what string, got, want reflect.Value) {
	t.Helper()
	switch got.Kind() {
	case reflect.Struct:
		for i := range got.NumField() {
			compareFields(t, what+"."+got.Type().Field(i).Name, got.Field(i), want.Field(i))
		}
		return
	case reflect.Pointer:
		if got.IsNil() || want.IsNil() {
			if got.IsNil() != want.IsNil() {
				t.Errorf("%s: %v, want %v", what, got.Interface(), want.Interface())
			}
			return
		}
		compareFields(t, what, got.Elem(), want.Elem())
		return
	case reflect.Slice:
		// Decoders may give an empty slice for an absent one.
		if got.Type().Elem().Kind() == reflect.Uint8 {
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Errorf("%s: %q, want %q", what, got.Bytes(), want.Bytes())
			}
			return
		}
		if got.Len() != want.Len() {
			t.Errorf("%s: %d elements, want %d", what, got.Len(), want.Len())
			return
		}
		for i := range got.Len() {
			compareFields(t, fmt.Sprintf("%s[%d]", what, i), got.Index(i), want.Index(i))
		}
		return
	}
	if !reflect.DeepEqual(got.Interface(), want.Interface()) {
		t.Errorf("%s: %#v, want %#v", what, got.Interface(), want.Interface())
	}
}
