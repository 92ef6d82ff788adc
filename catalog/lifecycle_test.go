package catalog

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/refcount"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

// fingerprint renders everything the lifecycle commands decide on, in a
// fixed order, so that two machines can be compared.
func (m *machine) fingerprint() string {
	var b strings.Builder
	refs := make([]ref, 0, len(m.entries))
	for r := range m.entries {
		refs = append(refs, r)
	}
	slices.SortFunc(refs, func(x, y ref) int {
		if c := strings.Compare(x.job, y.job); c != 0 {
			return c
		}
		return cmpUint(x.id, y.id)
	})
	for _, r := range refs {
		e := m.entries[r]
		fmt.Fprintf(&b, "entry %s owner=%s adopted=%s pinned=%v discarding=%v manifest=%x\n", r, e.owner,
			e.adoptedAt.UTC().Format(time.RFC3339Nano), e.pinned, e.discarding, sha256.Sum256(e.enc))
	}
	jobs := make([]string, 0, len(m.jobs))
	for name := range m.jobs {
		jobs = append(jobs, name)
	}
	slices.Sort(jobs)
	for _, name := range jobs {
		j := m.jobs[name]
		fmt.Fprintf(&b, "job %s base=%s prev=%s restored=%v degraded=%v no-claim=%s %v\n", name, j.base, j.prevBase, j.baseRestored, j.degraded, j.noClaimFrom, j.noClaim)
		ids := make([]uint64, 0, len(j.inflight))
		for id := range j.inflight {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			inf := j.inflight[id]
			fmt.Fprintf(&b, "  inflight %d started=%s completing=%v\n", id, inf.started.UTC().Format(time.RFC3339Nano), inf.completing)
			for _, hs := range [][]*backend.Handle{inf.handles, inf.extra} {
				for _, h := range hs {
					enc, _ := backend.EncodeHandle(h)
					fmt.Fprintf(&b, "    handle %s %x\n", h.Task, sha256.Sum256(enc))
				}
			}
		}
		for _, r := range j.history {
			fmt.Fprintf(&b, "  history %d %s %s..%s %s tasks=%d size=%d/%d no-channels=%v\n", r.ID, r.Status,
				r.Started.UTC().Format(time.RFC3339Nano), r.Ended.UTC().Format(time.RFC3339Nano), r.Reason, r.Tasks, r.CheckpointedSize, r.FullSize, r.WithoutChannelState)
		}
	}
	sps := make([]string, 0, len(m.savepoints))
	for id, sp := range m.savepoints {
		sps = append(sps, fmt.Sprintf("savepoint %s %x", id, sha256.Sum256(sp.enc)))
	}
	for id := range m.spInflight {
		sps = append(sps, "savepoint in flight "+id)
	}
	slices.Sort(sps)
	for _, sp := range sps {
		fmt.Fprintln(&b, sp)
	}
	for _, owner := range m.reg.Owners() {
		fmt.Fprintf(&b, "owner %q %v\n", owner, m.reg.Objects(owner))
	}
	prot := make([]string, 0, len(m.guard.protect))
	for p, n := range m.guard.protect {
		prot = append(prot, fmt.Sprintf("protect %s %d", p, n))
	}
	slices.Sort(prot)
	b.WriteString(strings.Join(prot, "\n"))
	return b.String()
}

// describe renders what an outcome decided.
func (o outcome) describe() string {
	var b strings.Builder
	if o.done != nil {
		fmt.Fprintf(&b, "done %d; ", o.done.CheckpointID)
	}
	fmt.Fprintf(&b, "started %s; ", o.started.UTC().Format(time.RFC3339Nano))
	for _, h := range o.handles {
		fmt.Fprintf(&b, "handle %s; ", h.Task)
	}
	if o.entry != nil {
		fmt.Fprintf(&b, "entry %s; ", o.entry.ref)
	}
	fmt.Fprintf(&b, "release %v; shared %v; ", o.release, o.releaseShared)
	for _, e := range o.discard {
		fmt.Fprintf(&b, "discard %s; ", e.ref)
	}
	return b.String()
}

// TestMachineReplaysItsCommands runs random checkpoint lifecycles through
// a Catalog (begins, reports, completions with handles passed directly or
// reported before, aborts, deletions, retention, savepoints, claim and
// no-claim restores of checkpoints and savepoints, notes), records every
// command its machine took, and applies them to a fresh machine: it must
// take every one, decoded from its encoding as a log would carry it, and
// end in the same state. This is what makes the machine a state machine
// that a log can replicate: no decision depends on I/O, the clock or
// anything but the commands. On the way the replica restarts from its
// image (a log's snapshot), and the catalog's machine read back from its
// image must equal it too.
func TestMachineReplaysItsCommands(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		mem := memstore.New()
		clk := &testClock{}
		o := clk.opts(mem)
		o.Retain = rapid.IntRange(1, 3).Draw(rt, "retain")
		// Replicated: the catalog decides through a log onto two
		// replicas (the second must end up equal too).
		var l *fakeLog
		if rapid.Bool().Draw(rt, "replicated") {
			l = &fakeLog{replicas: []*Replica{NewReplica(o.Retain, 0), NewReplica(o.Retain, 0)}}
			o.Replica, o.Propose = l.replicas[0], l.propose(0)
		}
		c, err := Open(ctx, o)
		if err != nil {
			rt.Fatal(err)
		}
		defer c.Close()
		type taken struct{ enc []byte }
		var log []taken
		c.mu.Lock()
		c.mu.observe = func(cmd command) {
			// As a log would carry it: encoded, and decoded on replay.
			enc, err := encodeCommand(cmd)
			if err != nil {
				rt.Fatalf("encode %s: %v", cmd.Op, err)
			}
			log = append(log, taken{enc: enc})
		}
		c.mu.Unlock()

		tasks := map[string][]*fakeTask{}
		next := map[string]uint64{}
		for _, job := range []string{"a", "b"} {
			tasks[job] = []*fakeTask{
				newFakeTask(job, "op", 0, backend.KeyGroupRange{Start: 0, End: 63}),
				newFakeTask(job, "op", 1, backend.KeyGroupRange{Start: 64, End: 127}),
			}
			next[job] = 1
		}
		inflight := map[ref][]*backend.Handle{} // handles uploaded, not reported
		spSeq := 0
		steps := rapid.IntRange(1, 40).Draw(rt, "steps")
		for range steps {
			job := rapid.SampledFrom([]string{"a", "b"}).Draw(rt, "job")
			clk.Advance(time.Duration(rapid.IntRange(1, 1000).Draw(rt, "ms")) * time.Millisecond)
			switch rapid.IntRange(0, 9).Draw(rt, "action") {
			case 0: // change state
				tk := tasks[job][rapid.IntRange(0, 1).Draw(rt, "task")]
				tk.state[fmt.Sprint("k", rapid.IntRange(0, 9).Draw(rt, "key"))] = fmt.Sprint(rapid.Int().Draw(rt, "value"))
			case 1: // begin and upload a checkpoint
				id := next[job]
				next[job]++
				if err := c.BeginCheckpoint(job, id); err != nil {
					rt.Fatalf("begin: %v", err)
				}
				for _, tk := range tasks[job] {
					tk.snapshot(id)
					h, err := tk.upload(ctx, mem, id)
					if err != nil {
						rt.Fatal(err)
					}
					inflight[ref{job, id}] = append(inflight[ref{job, id}], h)
				}
			case 2, 3: // report some handles, complete with the rest
				r, ok := pickRef(rt, inflight, job)
				if !ok {
					continue
				}
				hs := inflight[r]
				n := rapid.IntRange(0, len(hs)).Draw(rt, "reported")
				for _, h := range hs[:n] {
					if err := c.AddTaskHandle(r.job, r.id, h); err != nil {
						rt.Fatalf("add handle: %v", err)
					}
				}
				if _, err := c.Complete(ctx, r.job, r.id, hs[n:]...); err != nil {
					rt.Fatalf("complete %s: %v", r, err)
				}
				delete(inflight, r)
				for _, tk := range tasks[r.job] {
					tk.notifyComplete(r.id)
				}
			case 4: // abort, after reporting some handles
				r, ok := pickRef(rt, inflight, job)
				if !ok {
					continue
				}
				hs := inflight[r]
				for _, h := range hs[:rapid.IntRange(0, len(hs)).Draw(rt, "reported")] {
					if err := c.AddTaskHandle(r.job, r.id, h); err != nil {
						rt.Fatalf("add handle: %v", err)
					}
				}
				if err := c.Abort(ctx, r.job, r.id, StatusDeclined, "test"); err != nil {
					rt.Fatalf("abort: %v", err)
				}
				delete(inflight, r)
				for _, tk := range tasks[r.job] {
					tk.notifyAborted(r.id)
				}
			case 5: // delete a retained checkpoint
				ids := c.Retained(job)
				if len(ids) == 0 {
					continue
				}
				id := rapid.SampledFrom(ids).Draw(rt, "delete")
				if err := c.DeleteCheckpoint(ctx, job, id); err != nil && !errors.Is(err, ErrState) {
					// ErrState: another job claimed it; a refusal.
					rt.Fatalf("delete: %v", err)
				}
			case 6: // a savepoint of a retained checkpoint
				ids := c.Retained(job)
				if len(ids) == 0 {
					continue
				}
				spSeq++
				if _, err := c.SavepointFromCheckpoint(ctx, fmt.Sprint("sp-", spSeq), job, rapid.SampledFrom(ids).Draw(rt, "savepoint of")); err != nil {
					rt.Fatalf("savepoint: %v", err)
				}
			case 7: // delete a savepoint
				sps := c.Savepoints()
				if len(sps) == 0 {
					continue
				}
				if err := c.DeleteSavepoint(ctx, rapid.SampledFrom(sps).Draw(rt, "delete savepoint").SavepointID); err != nil {
					rt.Fatalf("delete savepoint: %v", err)
				}
			case 8: // restore job from a retained checkpoint or a savepoint
				req := RestoreRequest{Job: job, Mode: rapid.SampledFrom([]Mode{ModeClaim, ModeNoClaim}).Draw(rt, "mode")}
				var opts []RestoreRequest
				for _, from := range []string{"a", "b"} {
					for _, id := range c.Retained(from) {
						opts = append(opts, RestoreRequest{FromJob: from, CheckpointID: id})
					}
					if len(c.Retained(from)) > 0 {
						opts = append(opts, RestoreRequest{FromJob: from}) // its latest
					}
				}
				for _, m := range c.Savepoints() {
					opts = append(opts, RestoreRequest{SavepointID: m.SavepointID})
				}
				if len(opts) == 0 {
					continue
				}
				pick := rapid.SampledFrom(opts).Draw(rt, "restore from")
				req.FromJob, req.CheckpointID, req.SavepointID = pick.FromJob, pick.CheckpointID, pick.SavepointID
				// The job's running checkpoints end with its tasks.
				for r := range inflight {
					if r.job == job {
						if err := c.Abort(ctx, job, r.id, StatusAborted, "restore"); err != nil {
							rt.Fatalf("abort before restore: %v", err)
						}
						delete(inflight, r)
					}
				}
				res, err := c.RestoreSource(ctx, req)
				if err != nil && req.CheckpointID == 0 && req.SavepointID == "" && errors.Is(err, ErrNotFound) {
					continue // the job's checkpoints were all claimed by the other
				}
				if err != nil {
					rt.Fatalf("restore %+v: %v", req, err)
				}
				// Tasks of another job's checkpoint restore by position.
				for i, tk := range tasks[job] {
					if err := tk.restore(ctx, res.Store, res.Handles[i], res.NoClaim); err != nil {
						rt.Fatalf("restore task: %v", err)
					}
				}
			case 9: // note a restore without channel state
				if ids := c.Retained(job); len(ids) > 0 {
					c.NoteWithoutChannelState(ctx, job, rapid.SampledFrom(ids).Draw(rt, "note"))
				}
			}
		}

		// Closed first: a replicated catalog's discarder may still be
		// applying commands.
		c.Close()
		c.mu.Lock()
		want := c.mu.fingerprint()
		c.mu.observe = nil
		c.mu.Unlock()

		replica := newMachine(c.opts.Retain, c.opts.MaxHistory)
		replica.reg = refcount.New()
		// Somewhere on the way the replica restarts from its image, as a
		// node restarts from a log's snapshot.
		restartAt := rapid.IntRange(0, len(log)).Draw(rt, "restart at")
		for i, tk := range log {
			if i == restartAt {
				replica = restarted(rt, &replica)
			}
			cmd, err := decodeCommand(tk.enc)
			if err != nil {
				rt.Fatalf("command %d does not decode: %v\n%s", i, err, tk.enc)
			}
			if _, err := replica.apply(cmd); err != nil {
				rt.Fatalf("command %d (%s of %s/%d) refused on replay: %v", i, cmd.Op, cmd.Job, cmd.ID, err)
			}
		}
		if got := replica.fingerprint(); got != want {
			rt.Fatalf("replayed machine differs\nreplayed:\n%s\noriginal:\n%s", got, want)
		}
		if l != nil {
			if got := l.replicas[1].s.fingerprint(); got != want {
				rt.Fatalf("the other replica differs\nother:\n%s\nleader's:\n%s", got, want)
			}
		}
		c.mu.Lock()
		fromImage := restarted(rt, &c.mu.machine)
		c.mu.Unlock()
		if got := fromImage.fingerprint(); got != want {
			rt.Fatalf("the catalog's machine read back from its image differs\nread back:\n%s\noriginal:\n%s", got, want)
		}
	})
}

// restarted reads m back from its image, and checks that the image of
// what it read is the same.
func restarted(t interface{ Fatalf(string, ...any) }, m *machine) machine {
	img, err := m.snapshot()
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	back, err := restoreMachine(img, m.retain, m.maxHistory)
	if err != nil {
		t.Fatalf("restore the image: %v", err)
	}
	again, err := back.snapshot()
	if err != nil {
		t.Fatalf("snapshot of the restored machine: %v", err)
	}
	if string(again) != string(img) {
		t.Fatalf("the image changed through a restore:\n%s\n%s", img, again)
	}
	return back
}

// pickRef draws one in-flight checkpoint of job, if any.
func pickRef(rt *rapid.T, inflight map[ref][]*backend.Handle, job string) (ref, bool) {
	var ids []uint64
	for r := range inflight {
		if r.job == job {
			ids = append(ids, r.id)
		}
	}
	if len(ids) == 0 {
		return ref{}, false
	}
	slices.Sort(ids)
	return ref{job, rapid.SampledFrom(ids).Draw(rt, "checkpoint")}, true
}

// TestMachineDecidesAlike applies one series of commands to two machines
// and checks that each outcome is the same: a replica takes the same
// decisions as the machine that first took them, deletions included.
func TestMachineDecidesAlike(t *testing.T) {
	mem := memstore.New()
	clk := &testClock{}
	tasks := []*fakeTask{newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})}
	var cmds []command
	a, b := newMachine(1, DefaultMaxHistory), newMachine(1, DefaultMaxHistory)
	a.reg, b.reg = refcount.New(), refcount.New()
	step := func(cmd command) []outcome {
		t.Helper()
		cmds = append(cmds, cmd)
		var outs []outcome
		for _, m := range []*machine{&a, &b} {
			out, err := m.apply(cmd)
			if err != nil {
				t.Fatalf("%s: %v", cmd.Op, err)
			}
			outs = append(outs, out)
		}
		if x, y := outs[0].describe(), outs[1].describe(); x != y {
			t.Fatalf("%s decided differently:\n%s\n%s", cmd.Op, x, y)
		}
		return outs
	}
	var released []string
	for id := uint64(1); id <= 4; id++ {
		tasks[0].state["k"] = fmt.Sprint(id)
		tasks[0].snapshot(id)
		h, err := tasks[0].upload(ctx, mem, id)
		if err != nil {
			t.Fatal(err)
		}
		step(command{Op: opBegin, Job: "j", ID: id, Now: clk.Now()})
		step(command{Op: opAddHandle, Job: "j", ID: id, Handles: []*backend.Handle{h}})
		plan := step(command{Op: opStartComplete, Job: "j", ID: id})[0]
		mf := &Manifest{Version: ManifestVersion, Kind: KindCheckpoint, Job: "j", CheckpointID: id,
			Started: plan.started, Completed: clk.Now(), Tasks: plan.handles}
		for _, h := range plan.handles {
			mf.CheckpointedSize += h.CheckpointedSize
			mf.FullSize += h.FullSize
		}
		enc, err := EncodeManifest(mf)
		if err != nil {
			t.Fatal(err)
		}
		out := step(command{Op: opCompleted, Job: "j", ID: id, Manifest: enc})[0]
		tasks[0].notifyComplete(id)
		for _, e := range out.discard {
			d := step(command{Op: opDiscarded, Job: e.ref.job, ID: e.ref.id})[0]
			released = append(released, d.release...)
		}
	}
	if len(released) == 0 {
		t.Fatal("retention of 1 over 4 checkpoints released nothing")
	}
	if a.fingerprint() != b.fingerprint() {
		t.Fatal("the machines ended apart")
	}
	// A refused command changes nothing.
	before := a.fingerprint()
	if _, err := a.apply(command{Op: opCompleted, Job: "j", ID: 9, Manifest: []byte("x")}); err == nil {
		t.Fatal("completed of a checkpoint never begun was taken")
	}
	if a.fingerprint() != before {
		t.Fatal("a refused command changed the machine")
	}
}

// A machine image keeps what Open found damaged: the problems, the
// damaged checkpoint with an error that still wraps ErrCorrupt, the
// degraded job and the directory nothing may delete under.
func TestMachineImageKeepsDamage(t *testing.T) {
	s := memstore.New()
	clk := &testClock{}
	c := openCat(t, s, clk)
	a := newFakeTask("j", "op", 0, backend.KeyGroupRange{Start: 0, End: 127})
	a.state["k"] = "v"
	checkpoint(t, c, s, 1, a)
	checkpoint(t, c, s, 2, a)
	c.Close()
	flipManifestBit(t, s, "j", 2)
	if err := tiered.PutBytes(ctx, s, "k/"+JobFileName, []byte("not a job file")); err != nil {
		t.Fatal(err)
	}
	c2 := openCat(t, s, clk)
	if len(c2.Problems()) != 2 {
		t.Fatalf("problems %v", c2.Problems())
	}
	c2.mu.Lock()
	back := restarted(t, &c2.mu.machine)
	want := c2.mu.fingerprint()
	c2.mu.Unlock()
	if got := back.fingerprint(); got != want {
		t.Fatalf("read back:\n%s\nwant:\n%s", got, want)
	}
	if len(back.problems) != 2 {
		t.Fatalf("problems read back: %v", back.problems)
	}
	for i, p := range back.problems {
		if p.String() != c2.Problems()[i].String() || !errors.Is(p.Err, ErrCorrupt) {
			t.Fatalf("problem %d read back as %q (corrupt: %v), was %q", i, p, errors.Is(p.Err, ErrCorrupt), c2.Problems()[i])
		}
	}
	d, ok := back.damaged[ref{"j", 2}]
	if !ok || !errors.Is(d.Err, ErrCorrupt) {
		t.Fatalf("damaged checkpoint read back as %+v", d)
	}
	if !back.jobs["k"].degraded || !errors.Is(back.jobs["k"].damage, ErrCorrupt) {
		t.Fatalf("job k read back as %+v", back.jobs["k"])
	}
	if !back.live("j/chk-2/op-0/meta", func(string) bool { return false }) {
		t.Fatal("a file next to the damaged manifest may be deleted after the image")
	}
	// A damaged image is refused, naming what is wrong.
	img, err := c2.mu.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	img[len(img)/2] ^= 1
	if _, err := restoreMachine(img, 3, 10); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a damaged image: %v", err)
	}
}
