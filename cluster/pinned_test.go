package cluster

import (
	"bytes"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	pb "github.com/statedhq/stated/cluster/clusterpb"
)

// updatePinned regenerates testdata/pinned. Only for a new format
// version: keep the files of the old version (in a directory named after
// it) and a test that still reads them, since a node replays the log and
// snapshots that nodes of earlier versions wrote.
var updatePinned = flag.Bool("update", false, "regenerate the pinned format files in testdata/pinned")

// The pinned files (under testdata/pinned):
//
//	commands.hex        pinnedCommands(), encodeCommand each (protobuf,
//	                    version 5), in hex, one a line
//	v4/commands.jsonl   the same commands as JSON of version 4, as
//	                    nodes before version 5 wrote them (not
//	                    regenerated: a node still replays them)
//	snapshot.json       the state after applying them (the service's
//	                    image set), as snapshot.Persist writes it
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

// pinnedLines reads a pinned file of pinnedCommands' encodings, one a
// line (hex: hex-encoded).
func pinnedLines(t *testing.T, name string, isHex bool) [][]byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(clusterPinnedDir, name))
	if err != nil {
		t.Fatalf("pinned commands: %v (regenerate with -update only for a new format version)", err)
	}
	var out [][]byte
	for i, line := range strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n") {
		b := []byte(line)
		if isHex {
			if b, err = hex.DecodeString(line); err != nil || len(b) == 0 {
				t.Fatalf("%s line %d is not hex: %v", name, i+1, err)
			}
		}
		out = append(out, b)
	}
	if len(out) != len(pinnedCommands()) {
		t.Fatalf("%d commands in %s, the model has %d", len(out), name, len(pinnedCommands()))
	}
	return out
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
		var lines []string
		for _, c := range cmds {
			lines = append(lines, hex.EncodeToString(encodeCommand(c)))
		}
		if err := os.MkdirAll(clusterPinnedDir, 0o755); err != nil {
			t.Fatal(err)
		}
		for name, b := range map[string][]byte{"commands.hex": []byte(strings.Join(lines, "\n") + "\n"), "snapshot.json": persisted(t, st)} {
			if err := os.WriteFile(filepath.Join(clusterPinnedDir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, enc := range pinnedLines(t, "commands.hex", true) {
		if enc[0] != binaryCommand {
			t.Fatalf("pinned command %d is not a protobuf command: first byte %#x", i, enc[0])
		}
		got, err := decodeCommand(enc)
		if err != nil {
			t.Fatalf("pinned command %d does not decode: %v\n%x", i, err, enc)
		}
		if !reflect.DeepEqual(got, cmds[i]) {
			t.Errorf("pinned command %d decodes to\n%+v\nthe model is\n%+v", i, got, cmds[i])
		}
		if now := encodeCommand(cmds[i]); !bytes.Equal(now, enc) {
			t.Errorf("command %d (%s): this build encodes\n%x\nthe pinned bytes are\n%x\na format change needs a new version", i, cmds[i].Op, now, enc)
		}
	}
	// The JSON commands nodes of version 4 wrote decode to the same
	// commands (at their version), and give the same state.
	var old []command
	for i, line := range pinnedLines(t, "v4/commands.jsonl", false) {
		got, err := decodeCommand(line)
		if err != nil {
			t.Fatalf("pinned JSON command %d does not decode: %v\n%s", i, err, line)
		}
		want := cmds[i]
		want.V = jsonVersion
		if !reflect.DeepEqual(got, want) {
			t.Errorf("pinned JSON command %d decodes to\n%+v\nthe model is\n%+v", i, got, want)
		}
		if now := encodeJSONCommand(cmds[i]); !bytes.Equal(now, line) {
			t.Errorf("JSON command %d (%s): this build encodes\n%s\nthe pinned bytes are\n%s", i, cmds[i].Op, now, line)
		}
		old = append(old, got)
	}
	if got := pinnedState(t, old); !reflect.DeepEqual(got, st) {
		t.Errorf("the JSON commands give the state\n%+v\nthe protobuf ones\n%+v", got, st)
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

// TestCommandEncodings: a command protobuf cannot carry (a string that is
// not UTF-8) goes as JSON of version 4 and reads back the same; versions
// this node does not know, in either encoding, and damaged bytes are
// refused naming what was read.
func TestCommandEncodings(t *testing.T) {
	bad := command{Op: opPut, Key: "catalog/\xff", Value: []byte("v")}
	enc := encodeCommand(bad)
	if enc[0] != '{' {
		t.Fatalf("a key that is not UTF-8 encodes as %x, not as JSON", enc)
	}
	got, err := decodeCommand(enc)
	if err != nil {
		t.Fatal(err)
	}
	// JSON replaces the byte that is not UTF-8, the same on every node.
	if got.V != jsonVersion || got.Op != opPut || got.Key != "catalog/\ufffd" || string(got.Value) != "v" {
		t.Errorf("decoded %+v", got)
	}

	good := command{Op: opService, Value: []byte(`{"big":"` + strings.Repeat("x", 1000) + `"}`)}
	b := encodeCommand(good)
	if js := encodeJSONCommand(good); len(b) >= len(js)*4/5 {
		t.Errorf("a service command of %d bytes in protobuf, %d in JSON: the value should not be base64", len(b), len(js))
	}

	newer, err := proto.Marshal(&pb.Command{V: commandVersion + 1, Op: opPut, Key: "k"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"newer protobuf", append([]byte{binaryCommand}, newer...), fmt.Sprintf("command version %d in protobuf", commandVersion+1)},
		{"JSON of version 5", []byte(`{"v":5,"op":"put","key":"k"}`), "JSON command version 5"},
		{"damaged protobuf", []byte{binaryCommand, 0x0a, 0xff}, "cluster: command:"},
		{"neither", []byte("x"), "cluster: command:"},
	} {
		if _, err := decodeCommand(tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
}

// TestMixedLogApplies: a log that nodes of version 4 began (JSON
// commands) and nodes of version 5 continued (protobuf) applies, through
// the machine's Apply as raft calls it, to the state the commands give.
func TestMixedLogApplies(t *testing.T) {
	cmds := pinnedCommands()
	old := pinnedLines(t, "v4/commands.jsonl", false)
	f := newFSM(nil)
	for i, c := range cmds {
		if c.Op == opService {
			continue // no service here (pinnedState leaves it aside too)
		}
		data := encodeCommand(c)
		if i%2 == 0 {
			data = old[i]
		}
		if r, ok := f.Apply(&raft.Log{Index: uint64(i + 1), Type: raft.LogCommand, Data: data}).(result); !ok || r.Err != "" {
			t.Fatalf("command %d (%s, first byte %q): %+v", i, c.Op, data[0], r)
		}
	}
	want := pinnedState(t, cmds)
	want.Service = nil
	if !reflect.DeepEqual(f.st, want) {
		t.Errorf("the mixed log gives\n%+v\nthe commands give\n%+v", f.st, want)
	}
}
