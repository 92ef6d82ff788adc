package catalog

import (
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/refcount"
)

func handleOf(op string, sub, par int) *backend.Handle {
	return &backend.Handle{Version: backend.HandleVersionBase, Backend: backend.KindFile,
		Task: backend.TaskID{Job: "j", Operator: op, Subtask: sub}, MaxParallelism: 128,
		KeyGroups: backend.KeyGroupRangeForOperator(128, par, sub)}
}

// TestMissing: what a checkpoint without a task list lacks, from its
// handles and the job's open tasks.
func TestMissing(t *testing.T) {
	open := func(op string, subs ...int) []backend.TaskID {
		var out []backend.TaskID
		for _, s := range subs {
			out = append(out, backend.TaskID{Job: "j", Operator: op, Subtask: s})
		}
		return out
	}
	for _, c := range []struct {
		name    string
		handles []*backend.Handle
		open    []backend.TaskID
		want    []string // substrings, one per item; none: whole
	}{
		{"whole", []*backend.Handle{handleOf("a", 0, 2), handleOf("a", 1, 2), handleOf("b", 0, 1)}, open("a", 0, 1), nil},
		{"one of two subtasks", []*backend.Handle{handleOf("a", 0, 2)}, open("a", 0),
			[]string{"operator a: no handle holds key groups [64,127] (subtasks [1] of parallelism 2)"}},
		{"an open task without a handle", []*backend.Handle{handleOf("a", 0, 1)}, open("b", 0),
			[]string{"task j/b/0 is open but has no handle"}},
		{"a middle subtask", []*backend.Handle{handleOf("a", 0, 3), handleOf("a", 2, 3)}, nil,
			[]string{"key groups [43,85] (subtasks [1] of parallelism 3)"}},
		{"both", []*backend.Handle{handleOf("a", 1, 2)}, open("a", 0, 1),
			[]string{"task j/a/0 is open", "operator a: no handle holds key groups [0,63]"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := Missing(c.handles, c.open)
			if len(got) != len(c.want) {
				t.Fatalf("Missing = %q, want %d items like %q", got, len(c.want), c.want)
			}
			for i := range got {
				if !strings.Contains(got[i], c.want[i]) {
					t.Fatalf("item %d = %q, want it to say %q", i, got[i], c.want[i])
				}
			}
		})
	}
}

// TestAddHandleTokens: a fenced report's token rides in its command
// (version 2, version 1 without one); a newer token's handle replaces the
// task's older one, an older token's is refused; the tokens survive an
// image.
func TestAddHandleTokens(t *testing.T) {
	h := handleOf("a", 0, 1)
	h.CheckpointID = 1
	plain, err := encodeCommand(command{Op: opAddHandle, Job: "j", ID: 1, Handles: []*backend.Handle{h}})
	if err != nil || !strings.Contains(string(plain), `"v":1`) {
		t.Fatalf("a command without a token: %s %v", plain, err)
	}
	enc, err := encodeCommand(command{Op: opAddHandle, Job: "j", ID: 1, Handles: []*backend.Handle{h}, Token: 7})
	if err != nil || !strings.Contains(string(enc), `"v":2`) {
		t.Fatalf("a command with a token: %s %v", enc, err)
	}
	cmd, err := decodeCommand(enc)
	if err != nil || cmd.Token != 7 {
		t.Fatalf("decoded %+v %v", cmd, err)
	}
	bad := strings.Replace(string(enc), `"v":2`, `"v":1`, 1)
	if _, err := decodeCommand([]byte(bad)); err == nil {
		t.Fatal("a version 1 command with a token was read")
	}

	m := newMachine(3, DefaultMaxHistory)
	m.reg = refcount.New()
	if err := m.begin("j", 1, time.Unix(1, 0)); err != nil {
		t.Fatal(err)
	}
	if err := m.addHandle("j", 1, h, 7); err != nil {
		t.Fatal(err)
	}
	newer := handleOf("a", 0, 1)
	newer.CheckpointID, newer.FullSize = 1, 99
	if err := m.addHandle("j", 1, newer, 5); err == nil || !strings.Contains(err.Error(), "older") {
		t.Fatalf("an older token's report: %v", err)
	}
	if err := m.addHandle("j", 1, newer, 9); err != nil {
		t.Fatalf("a newer token's report: %v", err)
	}
	inf := m.jobs["j"].inflight[1]
	if len(inf.handles) != 1 || inf.handles[0].FullSize != 99 || inf.tokens[h.Task] != 9 {
		t.Fatalf("after the takeover: %d handles, size %d, token %d", len(inf.handles), inf.handles[0].FullSize, inf.tokens[h.Task])
	}
	img, err := m.snapshot()
	if err != nil {
		t.Fatal(err)
	}
	back, err := restoreMachine(img, 3, DefaultMaxHistory)
	if err != nil {
		t.Fatal(err)
	}
	if tok := back.jobs["j"].inflight[1].tokens[h.Task]; tok != 9 {
		t.Fatalf("token after an image: %d", tok)
	}
}
