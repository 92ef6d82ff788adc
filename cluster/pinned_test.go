package cluster

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// updatePinned regenerates testdata/pinned. Only for a new format
// version: keep the files of the old version (in a directory named after
// it) and a test that still reads them, since a node replays the log and
// snapshots that nodes of earlier versions wrote.
var updatePinned = flag.Bool("update", false, "regenerate the pinned format files in testdata/pinned")

// The pinned files (under testdata/pinned):
//
//	commands.jsonl   pinnedCommands(), encodeCommand each, one a line
//	snapshot.json    the state after applying them (the service's image
//	                 set), as snapshot.Persist writes it
const clusterPinnedDir = "testdata/pinned"

// pinnedCommands has every operation and every field of a command set.
func pinnedCommands() []command {
	cmds := []command{
		{Op: opAcquire, Task: "j/op/0", Holder: "n1", Req: "r1"},
		{Op: opAcquire, Task: "j/op/1", Holder: "n2", Req: "r2"},
		{Op: opCheck, Task: "j/op/0", Token: 1},
		{Op: opRelease, Task: "j/op/1", Holder: "n2", Token: 2, Req: "r3"},
		{Op: opPut, Key: "catalog/a", Value: []byte("va\x00\xff")},
		{Op: opPut, Key: "catalog/b", Value: []byte("vb")},
		{Op: opDeleteRange, Key: "catalog/b", To: "catalog/c"},
		{Op: opPutMany, Records: map[string][]byte{"catalog/x": []byte("x"), "catalog/y": []byte("y")},
			Checks: map[string]Check{"catalog/x": {Task: "j/op/0", Token: 1}, "catalog/y": {Task: "j/op/0", Token: 99}}},
		{Op: opService, Value: []byte(`{"v":1,"op":"take-over"}`), Checks: map[string]Check{"": {Task: "j/op/0", Token: 1}}},
	}
	for i := range cmds {
		cmds[i].V = commandVersion
	}
	return cmds
}

// pinnedState applies cmds (the service's aside: no service runs here)
// and sets a service image.
func pinnedState(t *testing.T, cmds []command) state {
	t.Helper()
	st := newFSM(nil).st
	for i, c := range cmds {
		if c.Op == opService {
			continue
		}
		if r := st.apply(c); r.Err != "" {
			t.Fatalf("command %d (%s): %s", i, c.Op, r.Err)
		}
	}
	st.Service = []byte("STMS service image")
	return st
}

// bufSink is a raft.SnapshotSink over a buffer.
type bufSink struct{ bytes.Buffer }

func (s *bufSink) ID() string    { return "pinned" }
func (s *bufSink) Cancel() error { return nil }
func (s *bufSink) Close() error  { return nil }

func persisted(t *testing.T, st state) []byte {
	t.Helper()
	var sink bufSink
	if err := (&snapshot{st: st}).Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

// TestPinnedCommandsAndSnapshot reads the committed raft commands and
// snapshot: each command decodes to the model and this build encodes the
// model to the same bytes; the snapshot decodes to the state the commands
// give, field by field, and this build persists that state to the same
// bytes. An encoding change fails it: a change is a new version.
func TestPinnedCommandsAndSnapshot(t *testing.T) {
	cmds := pinnedCommands()
	st := pinnedState(t, cmds)
	if *updatePinned {
		var lines [][]byte
		for _, c := range cmds {
			lines = append(lines, encodeCommand(c))
		}
		if err := os.MkdirAll(clusterPinnedDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{"commands.jsonl": append(bytes.Join(lines, []byte("\n")), '\n'), "snapshot.json": persisted(t, st)} {
			if err := os.WriteFile(filepath.Join(clusterPinnedDir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	raw, err := os.ReadFile(filepath.Join(clusterPinnedDir, "commands.jsonl"))
	if err != nil {
		t.Fatalf("pinned commands: %v (regenerate with -update only for a new format version)", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(lines) != len(cmds) {
		t.Fatalf("%d pinned commands, the model has %d", len(lines), len(cmds))
	}
	for i, line := range lines {
		got, err := decodeCommand([]byte(line))
		if err != nil {
			t.Fatalf("pinned command %d does not decode: %v\n%s", i, err, line)
		}
		if !reflect.DeepEqual(got, cmds[i]) {
			t.Errorf("pinned command %d decodes to\n%+v\nthe model is\n%+v", i, got, cmds[i])
		}
		if now := encodeCommand(cmds[i]); string(now) != line {
			t.Errorf("command %d (%s): this build encodes\n%s\nthe pinned bytes are\n%s\na format change needs a new version", i, cmds[i].Op, now, line)
		}
	}

	snap, err := os.ReadFile(filepath.Join(clusterPinnedDir, "snapshot.json"))
	if err != nil {
		t.Fatalf("pinned snapshot: %v", err)
	}
	got, err := decodeState(bytes.NewReader(snap))
	if err != nil {
		t.Fatalf("the pinned snapshot does not decode: %v", err)
	}
	if !reflect.DeepEqual(got, st) {
		t.Errorf("the pinned snapshot decodes to\n%+v\nthe commands give\n%+v", got, st)
	}
	if got.Next != 2 || got.Fences["j/op/0"].Holder != "n1" || string(got.Journal["catalog/x"]) != "x" || got.Journal["catalog/y"] != nil ||
		len(got.DoneOrder) != 3 || string(got.Service) != "STMS service image" {
		t.Errorf("the pinned snapshot's state is not the commands': %+v", got)
	}
	if now := persisted(t, st); !bytes.Equal(now, snap) {
		t.Errorf("this build persists the pinned state differently (%d vs %d bytes): a format change needs a new version", len(now), len(snap))
	}
}
