package catalog

import (
	"fmt"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/memstore"
)

// benchTasks simulates lsm-like tasks: each has `files` shared files;
// every checkpoint replaces `fresh` of them (rotating) with new uploads,
// references the rest, and writes one private file.
type benchTasks struct {
	s     tiered.Store
	files int
	fresh int
	gen   map[[2]int]uint64 // (task, slot) -> checkpoint that uploaded it
}

func (bt *benchTasks) handle(b *testing.B, job string, task int, id uint64) *backend.Handle {
	h := &backend.Handle{Version: backend.HandleFormatVersion, Backend: backend.KindLSM,
		Task: backend.TaskID{Job: job, Operator: "op", Subtask: task}, CheckpointID: id,
		KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, MaxParallelism: 128}
	data := []byte("sst")
	crc := frame.Checksum(data)
	for k := 0; k < bt.fresh; k++ {
		bt.gen[[2]int{task, int((id*uint64(bt.fresh) + uint64(k)) % uint64(bt.files))}] = id
	}
	for f := 0; f < bt.files; f++ {
		g, ok := bt.gen[[2]int{task, f}]
		if !ok {
			g = id
			bt.gen[[2]int{task, f}] = id
		}
		p := fmt.Sprintf("%s/shared/t%d-f%d-g%d", job, task, f, g)
		if g == id {
			if err := tiered.PutBytes(ctx, bt.s, p, data); err != nil {
				b.Fatal(err)
			}
		}
		h.Files = append(h.Files, backend.FileRef{Path: p, Size: 3, CRC32C: crc, Shared: true})
	}
	pp := fmt.Sprintf("%s/chk-%d/op-%d/MANIFEST", job, id, task)
	if err := tiered.PutBytes(ctx, bt.s, pp, data); err != nil {
		b.Fatal(err)
	}
	h.Files = append(h.Files, backend.FileRef{Path: pp, Size: 3, CRC32C: crc})
	return h
}

// BenchmarkComplete: one checkpoint of 8 tasks with 50 files each (5 new
// per task), including retention's discard of the oldest checkpoint.
func BenchmarkComplete(b *testing.B) {
	s := memstore.New()
	clk := &testClock{}
	c, err := Open(ctx, clk.opts(s))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	id := uint64(0)
	bt := &benchTasks{s: s, files: 50, fresh: 5, gen: map[[2]int]uint64{}}
	next := func() {
		id++
		if err := c.BeginCheckpoint("j", id); err != nil {
			b.Fatal(err)
		}
		for task := 0; task < 8; task++ {
			if err := c.AddTaskHandle("j", id, bt.handle(b, "j", task, id)); err != nil {
				b.Fatal(err)
			}
		}
	}
	for i := 0; i < 4; i++ {
		next()
		if _, err := c.Complete(ctx, "j", id); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		next()
		b.StartTimer()
		if _, err := c.Complete(ctx, "j", id); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGC: one sweep over a local checkpoint root holding `live`
// referenced objects and `orphans` unreferenced old ones, deleting the
// orphans in batches.
func BenchmarkGC(b *testing.B) {
	orphans := 2000
	if testing.Short() {
		orphans = 200
	}
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s, err := localfs.Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		clk := &testClock{}
		c, err := Open(ctx, clk.opts(s))
		if err != nil {
			b.Fatal(err)
		}
		bt := &benchTasks{s: s, files: 500, fresh: 500, gen: map[[2]int]uint64{}}
		for id := uint64(1); id <= 2; id++ {
			if err := c.BeginCheckpoint("j", id); err != nil {
				b.Fatal(err)
			}
			if _, err := c.Complete(ctx, "j", id, bt.handle(b, "j", 0, id)); err != nil {
				b.Fatal(err)
			}
		}
		for o := 0; o < orphans; o++ {
			if err := tiered.PutBytes(ctx, s, fmt.Sprintf("j/shared/orphan-%d", o), []byte("x")); err != nil {
				b.Fatal(err)
			}
		}
		clk.Advance(2 * time.Hour)
		b.StartTimer()
		rep, err := c.GC(ctx, false)
		if err != nil || len(rep.Orphans) != orphans {
			b.Fatalf("gc: %d orphans (%v)", len(rep.Orphans), err)
		}
		b.StopTimer()
		c.Close()
		b.ReportMetric(float64(rep.Scanned), "objects/op")
	}
}

// BenchmarkDecodeCompletion: what every node of a cluster decodes for a
// completion that carries its daemon's reports: the batch of 6 tasks'
// add-handle commands (4 files each) and the completed command with the
// manifest.
//
//	go test ./catalog -run '^$' -bench DecodeCompletion
func BenchmarkDecodeCompletion(b *testing.B) {
	bt := &benchTasks{s: memstore.New(), files: 4, fresh: 1, gen: map[[2]int]uint64{}}
	var batch []command
	var hs []*backend.Handle
	for task := range 6 {
		h := bt.handle(b, "j", task, 1)
		h.KeyGroups = backend.KeyGroupRangeForOperator(128, 6, task)
		hs = append(hs, h)
		batch = append(batch, command{Op: opAddHandle, Job: "j", ID: 1, Handles: []*backend.Handle{h}, Token: uint64(task + 1)})
	}
	m := &Manifest{Version: ManifestVersion, Kind: KindCheckpoint, Job: "j", CheckpointID: 1, Started: time.Unix(1, 0).UTC(),
		Completed: time.Unix(2, 0).UTC(), Tasks: hs}
	enc, err := EncodeManifest(m)
	if err != nil {
		b.Fatal(err)
	}
	cmd, err := encodeCommand(command{Op: opBatch, Batch: append(batch, command{Op: opCompleted, Job: "j", ID: 1, Manifest: enc})})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		c, err := decodeCommand(cmd)
		if err != nil {
			b.Fatal(err)
		}
		decodeManifests(&c)
		if c.Batch[len(c.Batch)-1].decoded == nil {
			b.Fatal("the manifest did not decode")
		}
	}
	b.ReportMetric(float64(len(cmd)), "entry-bytes")
}
