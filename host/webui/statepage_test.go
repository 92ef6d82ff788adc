package webui_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/host/webui"
)

// checkpointState fetches /ui/api/checkpoint of job's checkpoint id.
func checkpointState(t *testing.T, base, job string, id uint64) (int, webui.CheckpointState, string) {
	t.Helper()
	code, body := get(t, fmt.Sprintf("%s/ui/api/checkpoint?job=%s&id=%d", base, job, id), "")
	var cs webui.CheckpointState
	if code == http.StatusOK {
		if err := json.Unmarshal([]byte(body), &cs); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
	}
	return code, cs, body
}

// TestCheckpointStateAPI: the daemon reads a retained checkpoint's state
// over HTTP: per state and per key group its entries and bytes, which
// add up, for the checkpoints of history() (checkpoint 3 holds the 1200
// keys written before it, 2 the 600 before it); the checkpoint page draws
// the state table and one heat-strip cell per key group, and the history
// links completed checkpoints to it. A failed or unknown checkpoint is
// 404, a bad query 400.
func TestCheckpointStateAPI(t *testing.T) {
	_, base := history(t, "")
	for id, want := range map[uint64]int64{3: 1200, 2: 600} {
		code, cs, body := checkpointState(t, base, "orders", id)
		if code != http.StatusOK {
			t.Fatalf("checkpoint %d: %d %s", id, code, body)
		}
		if cs.Entries != want || len(cs.States) != 1 || cs.States[0].State != "v" || cs.States[0].Entries != want ||
			cs.States[0].Kind != "value" || cs.MaxParallelism != 128 {
			t.Fatalf("checkpoint %d: %+v, want %d entries of value state v", id, cs, want)
		}
		if len(cs.Operators) != 1 || cs.Operators[0].Operator != "sum" {
			t.Fatalf("checkpoint %d operators: %+v", id, cs.Operators)
		}
		var entries, bytes int64
		for _, g := range cs.Operators[0].KeyGroups {
			entries += g.Entries
			bytes += g.Bytes
			if g.KeyGroup < 0 || g.KeyGroup > 127 || g.Entries <= 0 {
				t.Fatalf("key group %+v", g)
			}
		}
		if entries != want || bytes != cs.Bytes || cs.Bytes < want*100 {
			t.Fatalf("checkpoint %d: key groups add up to %d entries, %d bytes; total %d bytes", id, entries, bytes, cs.Bytes)
		}
		if len(cs.Operators[0].KeyGroups) < 100 || cs.Operators[0].Skew < 1 {
			t.Fatalf("checkpoint %d: %d key groups hold its %d keys, skew %v", id, len(cs.Operators[0].KeyGroups), want, cs.Operators[0].Skew)
		}
	}
	for _, q := range []string{"job=orders&id=4", "job=orders&id=99", "job=nope&id=1"} {
		if code, body := get(t, base+"/ui/api/checkpoint?"+q, ""); code != http.StatusNotFound {
			t.Errorf("%s: %d %s, want 404", q, code, body)
		}
	}
	for _, q := range []string{"", "job=orders", "job=orders&id=x", "job=a/b&id=1"} {
		if code, _ := get(t, base+"/ui/api/checkpoint?"+q, ""); code != http.StatusBadRequest {
			t.Errorf("%q: %d, want 400", q, code)
		}
	}
	code, page := get(t, base+"/ui/checkpoint?job=orders&id=3", "")
	if code != 200 {
		t.Fatalf("/ui/checkpoint %d: %s", code, page)
	}
	if n := strings.Count(page, `<rect class="cell"`); n != 128 {
		t.Errorf("heat strip has %d cells, want 128", n)
	}
	for _, want := range []string{`data-state="v" data-entries="1200"`, `svg class="heat" data-operator="sum"`} {
		if !strings.Contains(page, want) {
			t.Errorf("checkpoint page lacks %s", want)
		}
	}
	_, hist := get(t, base+"/ui/", "")
	if !strings.Contains(hist, `href="checkpoint?job=orders&amp;id=3"`) || strings.Contains(hist, `href="checkpoint?job=orders&amp;id=4"`) {
		t.Errorf("the history links completed checkpoints to their state page, and only those")
	}
}

// TestCheckpointStateOfHeap: a heap checkpoint, whose files live in the
// daemon's memory and cannot be read offline, is read by the daemon.
func TestCheckpointStateOfHeap(t *testing.T) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "webui")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	n, err := host.Open(ctx, host.Options{DataDir: filepath.Join(dir, "d"), MetricsAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	c, err := client.Dial(n.Socket(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	in, err := c.Open(ctx, client.OpenSpec{Task: backend.TaskID{Job: "h", Operator: "op", Subtask: 0},
		KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, Backend: backend.KindHeap,
		States: []backend.StateDescriptor{{Name: "m", Kind: backend.KindMap}}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		in.MapPut("m", []byte(fmt.Sprintf("k%d", i)), nil, []byte("a"), []byte("1"))
		in.MapPut("m", []byte(fmt.Sprintf("k%d", i)), nil, []byte("b"), []byte("2"))
	}
	if _, err := in.SnapshotWith(ctx, 1, client.SnapshotOptions{Wait: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteCheckpoint(ctx, "h", 1); err != nil {
		t.Fatal(err)
	}
	code, cs, body := checkpointState(t, "http://"+n.MetricsAddr().String(), "h", 1)
	if code != 200 || cs.Entries != 100 || len(cs.States) != 1 || cs.States[0].Kind != "map" {
		t.Fatalf("heap checkpoint: %d %+v %s", code, cs, body)
	}
}
