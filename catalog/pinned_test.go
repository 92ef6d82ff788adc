package catalog

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/refcount"
)

// updatePinned regenerates testdata/pinned. Only for a new format
// version: keep the files of the old version (in a directory named after
// it) and a test that still reads them, since a cluster replays commands
// and images written by the nodes of earlier versions.
var updatePinned = flag.Bool("update", false, "regenerate the pinned format files in testdata/pinned")

// The pinned files (under testdata/pinned), what a cluster's log carries
// between versions and hosts:
//
//	commands.jsonl   pinnedCommands(), encodeCommand each, one a line
//	                 (versions 1 and 2: add-handle with a fencing token)
//	image.bin        the machine image after applying them (version 2:
//	                 an in-flight handle with a token)
const catalogPinnedDir = "testdata/pinned"

var pinnedT0 = time.Date(2026, 1, 2, 3, 4, 5, 600000000, time.UTC)

func pinnedCatalogHandle(id uint64) *backend.Handle {
	return &backend.Handle{
		Version: backend.HandleVersionBase, Backend: backend.KindHeap,
		Task:         backend.TaskID{Job: "j", Operator: "op", Subtask: 0},
		CheckpointID: id, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, MaxParallelism: 128,
		States:   []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}},
		Files:    []backend.FileRef{{Path: CheckpointDir("j", id) + "/op-0/state", Size: 10, CRC32C: 0x1234}},
		FullSize: 10, CheckpointedSize: 10,
	}
}

// pinnedCommands is a job's life as the log carries it: checkpoint 1
// completed (its report fenced), checkpoint 2 in flight with a fenced
// report, and a batch that begins and aborts checkpoint 3.
func pinnedCommands(t *testing.T) []command {
	t.Helper()
	h1 := pinnedCatalogHandle(1)
	mf := &Manifest{Version: ManifestVersion, Kind: KindCheckpoint, Job: "j", CheckpointID: 1,
		Started: pinnedT0, Completed: pinnedT0.Add(time.Second), Tasks: []*backend.Handle{h1},
		FullSize: h1.FullSize, CheckpointedSize: h1.CheckpointedSize}
	enc, err := EncodeManifest(mf)
	if err != nil {
		t.Fatal(err)
	}
	return []command{
		{Op: opBegin, Job: "j", ID: 1, Now: pinnedT0},
		{Op: opAddHandle, Job: "j", ID: 1, Handles: []*backend.Handle{h1}, Token: 7},
		{Op: opStartComplete, Job: "j", ID: 1},
		{Op: opCompleted, Job: "j", ID: 1, Manifest: enc},
		{Op: opBegin, Job: "j", ID: 2, Now: pinnedT0.Add(2 * time.Second)},
		{Op: opAddHandle, Job: "j", ID: 2, Handles: []*backend.Handle{pinnedCatalogHandle(2)}, Token: 9},
		{Op: opBatch, Batch: []command{
			{Op: opBegin, Job: "j", ID: 3, Now: pinnedT0.Add(3 * time.Second)},
			{Op: opAbort, Job: "j", ID: 3, Status: StatusAborted, Reason: "pinned"},
		}},
	}
}

// pinnedReplay applies cmds to a new machine and returns it.
func pinnedReplay(t *testing.T, cmds []command) machine {
	t.Helper()
	m := newMachine(3, DefaultMaxHistory)
	m.reg = refcount.New()
	for i, c := range cmds {
		if _, err := m.apply(c); err != nil {
			t.Fatalf("command %d (%s): %v", i, c.Op, err)
		}
	}
	return m
}

func writeCatalogPinned(t *testing.T, cmds []command) {
	t.Helper()
	var lines [][]byte
	for _, c := range cmds {
		b, err := encodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, b)
	}
	m := pinnedReplay(t, cmds)
	img, err := m.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(catalogPinnedDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{"commands.jsonl": append(bytes.Join(lines, []byte("\n")), '\n'), "image.bin": img} {
		if err := os.WriteFile(filepath.Join(catalogPinnedDir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPinnedCommandsAndImage reads the committed commands and image: each
// command decodes to the model and this build encodes the model to the
// same bytes; the commands replayed give a machine whose image is the
// pinned one byte for byte, and the pinned image restores to the same
// machine, field by field (fingerprint) and in the facts checked here.
// An encoding change fails it: a change is a new version.
func TestPinnedCommandsAndImage(t *testing.T) {
	cmds := pinnedCommands(t)
	if *updatePinned {
		writeCatalogPinned(t, cmds)
	}
	raw, err := os.ReadFile(filepath.Join(catalogPinnedDir, "commands.jsonl"))
	if err != nil {
		t.Fatalf("pinned commands: %v (regenerate with -update only for a new format version)", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
	if len(lines) != len(cmds) {
		t.Fatalf("%d pinned commands, the model has %d", len(lines), len(cmds))
	}
	versions := map[string]bool{}
	for i, line := range lines {
		got, err := decodeCommand([]byte(line))
		if err != nil {
			t.Fatalf("pinned command %d does not decode: %v\n%s", i, err, line)
		}
		if !reflect.DeepEqual(got, cmds[i]) {
			t.Errorf("pinned command %d decodes to\n%+v\nthe model is\n%+v", i, got, cmds[i])
		}
		now, err := encodeCommand(cmds[i])
		if err != nil {
			t.Fatal(err)
		}
		if string(now) != line {
			t.Errorf("command %d (%s): this build encodes\n%s\nthe pinned bytes are\n%s\na format change needs a new version", i, cmds[i].Op, now, line)
		}
		versions[line[:6]] = true
	}
	if !versions[`{"v":1`] || !versions[`{"v":2`] {
		t.Errorf("the pinned commands cover versions %v, want 1 and 2", versions)
	}

	img, err := os.ReadFile(filepath.Join(catalogPinnedDir, "image.bin"))
	if err != nil {
		t.Fatalf("pinned image: %v", err)
	}
	replayed := pinnedReplay(t, cmds)
	now, err := replayed.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(now, img) {
		t.Errorf("this build writes the image of the pinned commands differently (%d vs %d bytes): a format change needs a new version", len(now), len(img))
	}
	restored, err := restoreMachine(img, 3, DefaultMaxHistory)
	if err != nil {
		t.Fatalf("the pinned image does not restore: %v", err)
	}
	if got, want := restored.fingerprint(), replayed.fingerprint(); got != want {
		t.Errorf("the pinned image restores to\n%s\nthe replayed machine is\n%s", got, want)
	}
	if _, ok := restored.entries[ref{"j", 1}]; !ok {
		t.Error("checkpoint j/1 is not retained in the pinned image")
	}
	j := restored.jobs["j"]
	if j == nil || j.inflight[2] == nil || j.inflight[3] != nil {
		t.Fatalf("the pinned image's in-flight checkpoints are wrong: %+v", j)
	}
}
