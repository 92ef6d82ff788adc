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
	"time"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/host/webui"
)

// failReason is why the test's failed checkpoint failed.
const failReason = "upload quota of the test exceeded"

// history starts a daemon (with token, when not empty), completes
// checkpoints 1-3 of job "orders" with growing state, fails checkpoint 4,
// takes a native savepoint with id 5 and reopens the task from checkpoint
// 2 (no-claim). It returns the page's base URL.
func history(t *testing.T, token string) (*host.Host, string) {
	t.Helper()
	ctx := context.Background()
	// A short directory: the socket path must fit sun_path.
	dir, err := os.MkdirTemp("", "webui")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	opts := host.Options{DataDir: filepath.Join(dir, "d"), MetricsAddr: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if token != "" {
		opts.Listen, opts.Token = "127.0.0.1:0", token
	}
	n, err := host.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	c, err := client.Dial(n.Socket(), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	task := backend.TaskID{Job: "orders", Operator: "sum", Subtask: 0}
	spec := client.OpenSpec{Task: task, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
		Backend: backend.KindFile, States: []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}}
	in, err := c.Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= 4; id++ {
		for i := range 200 * int(id) {
			in.Put("v", []byte(fmt.Sprintf("k%d-%d", id, i)), nil, []byte(strings.Repeat("x", 100)))
		}
		o := client.SnapshotOptions{Wait: true}
		if id == 3 {
			// An unaligned checkpoint with in-flight data.
			err := in.WriteChannelState(ctx, id, []client.ChannelState{{Channel: backend.ChannelID{Direction: backend.ChannelInput},
				Kind: backend.ChannelForward, Buffers: [][]client.ChannelRecord{{{Data: []byte("in flight")}}}}})
			if err != nil {
				t.Fatal(err)
			}
			o.Stats = &client.CheckpointStats{Unaligned: true, StartDelay: 7 * time.Millisecond}
		}
		if _, err := in.SnapshotWith(ctx, id, o); err != nil {
			t.Fatal(err)
		}
		if id == 4 {
			if err := c.AbortCheckpoint(ctx, "orders", id, failReason); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := c.CompleteCheckpoint(ctx, "orders", id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.TriggerSavepoint(ctx, "orders", true, 5); err != nil {
		t.Fatal(err)
	}
	// The task restarts from checkpoint 2, no-claim: 2 is pinned, and the
	// open instance was restored from it.
	if err := in.Close(ctx); err != nil {
		t.Fatal(err)
	}
	spec.Restore = &client.Restore{CheckpointID: 2}
	if in, err = c.Open(ctx, spec); err != nil {
		t.Fatal(err)
	}
	// Left open: the page lists it.
	t.Cleanup(func() { in.Close(ctx) })
	return n, "http://" + n.MetricsAddr().String()
}

func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestStateAndPage: the JSON lists the history newest first with the
// failed checkpoint's reason, the timings of completed ones, the open
// instance and the savepoint; the page renders the rows and the charts
// and refers to nothing outside itself.
func TestStateAndPage(t *testing.T) {
	_, base := history(t, "")
	code, body := get(t, base+"/ui/api/state", "")
	if code != 200 {
		t.Fatalf("/ui/api/state %d: %s", code, body)
	}
	var st webui.State
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Jobs) != 1 || st.Jobs[0].Name != "orders" || len(st.Jobs[0].Checkpoints) != 4 {
		t.Fatalf("jobs: %+v", st.Jobs)
	}
	j := st.Jobs[0]
	if j.Completed != 3 || j.Failed != 1 {
		t.Fatalf("completed %d failed %d", j.Completed, j.Failed)
	}
	for i, cp := range j.Checkpoints {
		want := uint64(4 - i)
		if cp.ID != want {
			t.Fatalf("row %d is checkpoint %d, want %d (newest first)", i, cp.ID, want)
		}
		if want == 4 {
			if !cp.Failed || cp.Status != "aborted" || !strings.Contains(cp.Reason, failReason) {
				t.Fatalf("failed checkpoint: %+v", cp)
			}
			continue
		}
		if cp.Failed || cp.SyncMS == nil || cp.AsyncMS == nil || cp.FullSize <= 0 || cp.CheckpointedSize <= 0 || cp.DurationMS <= 0 {
			t.Fatalf("completed checkpoint %d: %+v", cp.ID, cp)
		}
	}
	if cp := j.Checkpoints[1]; !cp.Reported || !cp.Unaligned || cp.InFlightBytes <= 0 || cp.StartDelayMS != 7 {
		t.Fatalf("unaligned checkpoint 3: %+v", cp)
	}
	if cp := j.Checkpoints[2]; cp.Reported || cp.Unaligned || cp.InFlightBytes != 0 {
		t.Fatalf("checkpoint 2 reported nothing: %+v", cp)
	}
	if j.Checkpoints[1].FullSize <= j.Checkpoints[3].FullSize {
		t.Fatalf("full size did not grow: 3 %d, 1 %d", j.Checkpoints[1].FullSize, j.Checkpoints[3].FullSize)
	}
	if len(st.Instances) != 1 || st.Instances[0].Backend != "file" || st.Instances[0].KeyGroups != "0–127" ||
		st.Instances[0].LastCheckpoint != 3 || st.Instances[0].FullSize != j.Checkpoints[1].FullSize || st.Instances[0].RestoredFrom != 2 {
		t.Fatalf("instances: %+v", st.Instances)
	}
	if j.RestoredFrom != 2 || !j.Checkpoints[2].RestoredFrom || !j.Checkpoints[2].Pinned || j.Checkpoints[1].RestoredFrom || j.Checkpoints[1].Pinned {
		t.Fatalf("restored-from and pinned: job %d, checkpoints %+v", j.RestoredFrom, j.Checkpoints)
	}
	if len(st.Savepoints) != 1 || st.Savepoints[0].Checkpoint != 5 {
		t.Fatalf("savepoints: %+v", st.Savepoints)
	}
	var sawStore bool
	for _, c := range st.Counters {
		sawStore = sawStore || strings.HasPrefix(c.Name, "stated_store_")
	}
	if !sawStore {
		t.Fatalf("no store counter: %+v", st.Counters)
	}

	code, page := get(t, base+"/ui/", "")
	if code != 200 {
		t.Fatalf("/ui/ %d", code)
	}
	for _, want := range []string{`data-id="4" data-status="aborted"`, `class="checkpoint failed"`, failReason,
		`data-chart="duration"`, `data-chart="size"`, `<td class="type">unaligned</td>`, `class="bar failed"`, `data-task="orders/sum/0"`,
		`<span class="badge pinned">pinned</span><span class="badge restored">restored from</span>`, "restored from checkpoint 2"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	for _, ext := range []string{"http://", "https://", "src="} {
		if strings.Contains(page, ext) {
			t.Errorf("page refers to an external asset (%s)", ext)
		}
	}
	if resp, err := http.Get(base + "/"); err != nil || resp.Request.URL.Path != "/ui/" {
		t.Fatalf("/ does not lead to /ui/: %v %v", resp, err)
	}
}

// TestPageRequiresTheToken: with a token the page and the JSON refuse
// requests without it, take it as a bearer header, and a ?token= visit
// sets a cookie that works without the token in the address.
func TestPageRequiresTheToken(t *testing.T) {
	_, base := history(t, "s3cret")
	if code, body := get(t, base+"/ui/api/state", ""); code != http.StatusUnauthorized || !strings.Contains(body, "token") {
		t.Fatalf("no token: %d %s", code, body)
	}
	if code, _ := get(t, base+"/ui/", "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", code)
	}
	if code, _ := get(t, base+"/ui/api/state", "s3cret"); code != 200 {
		t.Fatalf("bearer token: %d", code)
	}
	jar := newJar()
	hc := &http.Client{Jar: jar}
	resp, err := hc.Get(base + "/ui/?token=s3cret")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Request.URL.RawQuery != "" || !strings.Contains(string(b), failReason) {
		t.Fatalf("?token=: %d at %s", resp.StatusCode, resp.Request.URL)
	}
	// /metrics stays open, as before.
	if code, _ := get(t, base+"/metrics", ""); code != 200 {
		t.Fatalf("/metrics %d", code)
	}
}
