package catalog

import (
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/refcount"
)

func seedManifest() []byte {
	m := &Manifest{Version: ManifestVersion, Kind: KindCheckpoint, Job: "j", CheckpointID: 3,
		Tasks: []*backend.Handle{{Version: backend.HandleFormatVersion, Backend: backend.KindFile,
			Task: backend.TaskID{Job: "j", Operator: "op", Subtask: 0}, CheckpointID: 3,
			KeyGroups: backend.KeyGroupRange{Start: 0, End: 1}, MaxParallelism: 128,
			Files: []backend.FileRef{{Path: "j/chk-3/op-0/state", Size: 10, CRC32C: 7, KeyGroupOffsets: []int64{0, 4, 10}}}}}}
	enc, err := EncodeManifest(m)
	if err != nil {
		panic(err)
	}
	return enc
}

// FuzzDecodeManifest: no input makes the decoder panic, and whatever it
// accepts encodes again to a manifest that decodes the same.
func FuzzDecodeManifest(f *testing.F) {
	f.Add(seedManifest())
	f.Add([]byte("STMF"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeManifest(data)
		if err != nil {
			return
		}
		enc, err := EncodeManifest(m)
		if err != nil {
			t.Fatalf("decoded manifest does not encode: %v", err)
		}
		m2, err := DecodeManifest(enc)
		if err != nil || !sameTasks(m, m2) || m2.Job != m.Job || m2.CheckpointID != m.CheckpointID {
			t.Fatalf("round trip changed the manifest: %v", err)
		}
		for _, h := range m.Tasks {
			for _, f := range h.Files {
				if err := backend.ValidatePath(f.Path); err != nil {
					t.Fatalf("accepted a path that escapes the root: %q", f.Path)
				}
			}
		}
	})
}

// FuzzDecodeJobFile: no input makes the job-file decoder panic.
func FuzzDecodeJobFile(f *testing.F) {
	enc, _ := encodeJobFile(&jobFile{Version: JobFileVersion, Job: "j", History: []Record{{ID: 1, Status: StatusCompleted}},
		Pinned: []uint64{1}, Adopted: []adoption{{Job: "k", ID: 2}}})
	f.Add(enc)
	f.Add([]byte("STJC\x01\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		jf, err := decodeJobFile(data)
		if err == nil && ValidateJob(jf.Job) != nil {
			t.Fatalf("accepted job name %q", jf.Job)
		}
	})
}

// FuzzClassify: every name is classified without panic, and a name the
// layout claims parses back to the same directory.
func FuzzClassify(f *testing.F) {
	for _, s := range []string{"j/chk-1/_metadata", "savepoints/x/data/j/shared/a", "j/shared/x", "j/_catalog", "chk-1", "j/chk-01/x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		n := classify(name)
		if n.kind == objCheckpoint || n.kind == objCheckpointManifest {
			if got := CheckpointDir(n.job, n.id); len(name) <= len(got) || name[:len(got)+1] != got+"/" {
				t.Fatalf("%q classified into %s", name, got)
			}
		}
	})
}

// FuzzDecodeCommand: no input makes the command decoder, or the machine
// applying what it accepts, panic; and whatever it accepts encodes again
// to the same command.
func FuzzDecodeCommand(f *testing.F) {
	h := &backend.Handle{Version: backend.HandleFormatVersion, Backend: backend.KindFile,
		Task: backend.TaskID{Job: "j", Operator: "op", Subtask: 0}, CheckpointID: 3,
		KeyGroups: backend.KeyGroupRange{Start: 0, End: 1}, MaxParallelism: 128,
		Files: []backend.FileRef{{Path: "j/chk-3/op-0/state", Size: 10, CRC32C: 7}}}
	for _, cmd := range []command{
		{Op: opBegin, Job: "j", ID: 3},
		{Op: opAddHandle, Job: "j", ID: 3, Handles: []*backend.Handle{h}},
		{Op: opStartComplete, Job: "j", ID: 3},
		{Op: opCompleted, Job: "j", ID: 3, Manifest: seedManifest()},
		{Op: opAbort, Job: "j", ID: 4, Status: StatusDeclined, Reason: "r"},
		{Op: opRestore, Job: "j", FromJob: "j", Mode: ModeClaim},
		{Op: opRestored, Job: "j", FromJob: "j", ID: 3, Mode: ModeNoClaim, Handles: []*backend.Handle{h}},
		{Op: opSavepointBegin, Savepoint: "sp"},
		{Op: opBatch, Batch: []command{{Op: opBegin, Job: "j", ID: 5}, {Op: opAddHandle, Job: "j", ID: 5, Handles: []*backend.Handle{h}}}},
	} {
		enc, err := encodeCommand(cmd)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(enc)
	}
	f.Add([]byte(`{"v":1,"op":"restored","handles":[null]}`))
	f.Add([]byte(`{"v":2,"op":"begin"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cmd, err := decodeCommand(data)
		if err != nil {
			return
		}
		enc, err := encodeCommand(cmd)
		if err != nil {
			t.Fatalf("decoded command does not encode: %v", err)
		}
		again, err := decodeCommand(enc)
		if err != nil {
			t.Fatalf("re-encoded command does not decode: %v", err)
		}
		if enc2, _ := encodeCommand(again); string(enc2) != string(enc) {
			t.Fatalf("round trip changed the command:\n%s\n%s", enc, enc2)
		}
		// The machine refuses or takes it; it never panics. Begin first,
		// so that the checkpoint commands reach their decisions.
		m := newMachine(1, DefaultMaxHistory)
		m.reg = refcount.New()
		if cmd.Job != "" {
			_, _ = m.apply(command{Op: opBegin, Job: cmd.Job, ID: cmd.ID})
		}
		_, _ = m.apply(cmd)
		_, _ = m.apply(cmd)
	})
}

// FuzzRestoreMachineImage: no input makes reading a machine image back
// panic, and an image read back encodes to the same bytes.
func FuzzRestoreMachineImage(f *testing.F) {
	m := newMachine(1, DefaultMaxHistory)
	m.reg = refcount.New()
	mf, err := DecodeManifest(seedManifest())
	if err != nil {
		f.Fatal(err)
	}
	for _, cmd := range []command{
		{Op: opBegin, Job: "j", ID: 3},
		{Op: opStartComplete, Job: "j", ID: 3, Handles: mf.Tasks},
		{Op: opCompleted, Job: "j", ID: 3, Manifest: seedManifest()},
		{Op: opBegin, Job: "j", ID: 4},
		{Op: opSavepointBegin, Savepoint: "sp"},
	} {
		if _, err := m.apply(cmd); err != nil {
			f.Fatalf("%s: %v", cmd.Op, err)
		}
	}
	img, err := m.snapshot()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(img)
	f.Add([]byte("STMS"))
	f.Fuzz(func(t *testing.T, data []byte) {
		back, err := restoreMachine(data, 1, DefaultMaxHistory)
		if err != nil {
			return
		}
		img, err := back.snapshot()
		if err != nil {
			t.Fatalf("a machine read back does not encode: %v", err)
		}
		again, err := restoreMachine(img, 1, DefaultMaxHistory)
		if err != nil {
			t.Fatalf("its image does not read back: %v", err)
		}
		if img2, _ := again.snapshot(); string(img2) != string(img) {
			t.Fatal("the image changed through a second restore")
		}
	})
}
