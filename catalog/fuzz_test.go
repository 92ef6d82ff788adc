package catalog

import (
	"testing"

	"github.com/statedhq/stated/backend"
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
