package fuzz

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
)

// flipTally counts the outcomes of single-bit flips; chanBytes and
// chanRefused count those in channel state objects.
type flipTally struct {
	bytes, refused, equal  atomic.Int64
	chanBytes, chanRefused atomic.Int64
}

// checkpointObjects are the objects a restore of checkpoint 2 of f reads:
// its manifest, every file its handles list (heap snapshots in the heap
// store) and its channel state objects, sorted.
func checkpointObjects(t *testing.T, f *fixture) []string {
	t.Helper()
	name := catalog.CheckpointManifest(job, 2)
	m, err := catalog.DecodeManifest(f.objects[name])
	if err != nil {
		t.Fatal(err)
	}
	out := []string{name}
	for _, h := range m.Tasks {
		for _, fr := range h.Files {
			p := fr.Path
			if fr.Pack != nil {
				// A packed file lies in its pack (backend.FileRef.Pack):
				// the pack is what the restore reads, once.
				p = fr.Pack.Object
			} else if h.Backend == backend.KindHeap {
				p = heapPrefix + p
			}
			if _, ok := f.objects[p]; !ok {
				t.Fatalf("the fixture lacks %s", p)
			}
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
		for _, p := range h.ChannelObjects() {
			if _, ok := f.objects[p]; !ok {
				t.Fatalf("the fixture lacks %s", p)
			}
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	sort.Strings(out)
	return out
}

// packedFiles maps each pack object of checkpoint 2 of f to the files
// packed in it (backend.FileRef.Pack): a damaged pack is refused naming
// the file whose bytes the flip hit, which is what the restore was reading.
func packedFiles(t *testing.T, f *fixture) map[string][]string {
	t.Helper()
	m, err := catalog.DecodeManifest(f.objects[catalog.CheckpointManifest(job, 2)])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	for _, h := range m.Tasks {
		for _, fr := range h.Files {
			if fr.Pack != nil {
				out[fr.Pack.Object] = append(out[fr.Pack.Object], fr.Path)
			}
		}
	}
	return out
}

// namesDamaged reports whether msg names the damaged object or one of the
// files packed in it.
func namesDamaged(msg, object string, files []string) bool {
	if strings.Contains(msg, object) {
		return true
	}
	for _, f := range files {
		if strings.Contains(msg, f) {
			return true
		}
	}
	return false
}

// allBytes makes TestSingleBitFlips flip every byte of the lsm checkpoint
// too, and every bit of every byte of the channel state objects (about
// 40,000 restores, four minutes on two cores).
var allBytes = flag.Bool("allbytes", false, "TestSingleBitFlips: flip every byte of every backend's checkpoint, every bit of channel state")

// TestSingleBitFlips flips one bit of every byte of every object of
// checkpoint 2 of each backend (the bit is the byte's offset mod 8), one
// flip per restore, and restores both subtasks: each must be refused with
// an error that wraps backend.ErrCorrupt and names the object, or restore
// the model exactly. Every byte of heap and file checkpoints, every 4th of
// the larger lsm one unless -allbytes; with -short every 13th byte. Every
// flip in a channel state object (every bit of every byte with -allbytes)
// must be refused, and found by catalog.Verify (stated verify; every 8th
// byte unless -allbytes): nothing in those objects lies outside a
// checksummed segment.
func TestSingleBitFlips(t *testing.T) {
	defer silence()()
	for _, kind := range kinds {
		stride := 1
		switch {
		case testing.Short():
			stride = 13
		case kind == backend.KindLSM && !*allBytes:
			stride = 4
		}
		t.Run(string(kind), func(t *testing.T) {
			f := fixtureOf(t, kind)
			root := scratchDir(t)
			var tally flipTally
			read := checkpointObjects(t, f)
			readers := channelReaders(t, f)
			packed := packedFiles(t, f)
			type job struct {
				name     string
				off, bit int
			}
			jobs := make(chan job)
			var wg sync.WaitGroup
			var failMu sync.Mutex
			var failures []string
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for j := range jobs {
						if msg := flipOne(f, root, read, readers, packed, j.name, j.off, j.bit, &tally); msg != "" {
							failMu.Lock()
							failures = append(failures, msg)
							failMu.Unlock()
						}
					}
				}()
			}
			for _, name := range read {
				for off := 0; off < len(f.objects[name]); off += stride {
					jobs <- job{name, off, off % 8}
					if *allBytes && isChannelObject(name) {
						for bit := range 8 {
							if bit != off%8 {
								jobs <- job{name, off, bit}
							}
						}
					}
				}
			}
			close(jobs)
			wg.Wait()
			for i, msg := range failures {
				if i == 10 {
					t.Errorf("... and %d more", len(failures)-10)
					break
				}
				t.Error(msg)
			}
			t.Logf("%s: %d bytes flipped, %d refused as corrupt, %d restored equal to the model; channel state: %d of %d refused",
				kind, tally.bytes.Load(), tally.refused.Load(), tally.equal.Load(), tally.chanRefused.Load(), tally.chanBytes.Load())
			if tally.bytes.Load() == 0 || tally.refused.Load()+tally.equal.Load() != tally.bytes.Load() {
				t.Errorf("%d flips, %d refused + %d equal", tally.bytes.Load(), tally.refused.Load(), tally.equal.Load())
			}
			if tally.chanBytes.Load() == 0 || tally.chanRefused.Load() != tally.chanBytes.Load() {
				t.Errorf("channel state objects: %d flips, %d refused (want all)", tally.chanBytes.Load(), tally.chanRefused.Load())
			}
		})
	}
}

// chanRange is a byte range of a channel state object that a subtask reads.
type chanRange struct{ sub, lo, hi int }

// channelReaders maps each channel state object of checkpoint 2 of f to
// the ranges its subtasks read.
func channelReaders(t *testing.T, f *fixture) map[string][]chanRange {
	t.Helper()
	m, err := catalog.DecodeManifest(f.objects[catalog.CheckpointManifest(job, 2)])
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]chanRange{}
	for _, h := range m.Tasks {
		for _, cs := range h.Channels {
			for _, sg := range cs.Segments {
				out[sg.Path] = append(out[sg.Path], chanRange{h.Task.Subtask, int(sg.Offset), int(sg.Offset + sg.Length)})
			}
		}
	}
	return out
}

// flipOne flips bit bit of byte off of name and restores both subtasks
// of checkpoint 2; it returns what went wrong ("" for an acceptable
// outcome, which it counts).
func flipOne(f *fixture, root string, read []string, readers map[string][]chanRange, packed map[string][]string, name string, off, bit int, tally *flipTally) string {
	// Only what the restore reads, and the job file: the rest would only
	// cost writes.
	objects := map[string][]byte{}
	for _, n := range append(read, job+"/"+catalog.JobFileName) {
		objects[n] = append([]byte(nil), f.objects[n]...)
	}
	objects[name][off] ^= 1 << bit
	tally.bytes.Add(1)
	channel := isChannelObject(name)
	if channel {
		tally.chanBytes.Add(1)
	}
	// The subtask that reads the damaged file first: the other one
	// restores exactly without reading it.
	subs := []int{0, 1}
	if strings.Contains(name, "/op-1/") {
		subs = []int{1, 0}
	}
	for _, r := range readers[name] {
		if r.sub == 1 && r.lo <= off && off < r.hi {
			subs = []int{1, 0}
		}
	}
	var err error
	for _, sub := range subs {
		err = restore(context.Background(), root, f, objects, source{ckpt: 2, parallelism: oldPar, subtask: sub, into: f.kind})
		if err != nil {
			break
		}
	}
	if channel && (off%8 == 0 || *allBytes) {
		// stated verify must see it too, without a restore (every 8th
		// byte: it costs a catalog of its own).
		if msg := verifyFinds(root, objects, name); msg != "" {
			return fmt.Sprintf("flip of bit %d of byte %d of channel state object %s: %s", bit, off, name, msg)
		}
	}
	switch {
	case err == nil && channel:
		return fmt.Sprintf("flip of bit %d of byte %d of channel state object %s: restored without an error", bit, off, name)
	case err == nil:
		tally.equal.Add(1)
		return ""
	case errors.Is(err, backend.ErrCorrupt) && namesDamaged(err.Error(), strings.TrimPrefix(name, heapPrefix), packed[name]):
		tally.refused.Add(1)
		if channel {
			tally.chanRefused.Add(1)
		}
		return ""
	}
	return fmt.Sprintf("flip of bit %d of byte %d of %s: %v", bit, off, name, err)
}

// verifyFinds opens a catalog over objects and verifies checkpoint 2: it
// returns what is wrong ("" when the report names damaged).
func verifyFinds(root string, objects map[string][]byte, damaged string) string {
	ctx := context.Background()
	dir, err := os.MkdirTemp(root, "verify-")
	if err != nil {
		return err.Error()
	}
	defer os.RemoveAll(dir)
	e, err := openEnv(ctx, dir, objects)
	if err != nil {
		return fmt.Sprintf("open: %v", err)
	}
	defer e.close()
	rep, err := e.cat.Verify(ctx, job, 2)
	if err != nil {
		return fmt.Sprintf("verify: %v", err)
	}
	for _, p := range rep.Problems {
		if strings.HasPrefix(p.Path, damaged) { // channel segments: "<object>[offset,+length)"
			return ""
		}
	}
	return fmt.Sprintf("verify reports %v, nothing about it", rep.Problems)
}
