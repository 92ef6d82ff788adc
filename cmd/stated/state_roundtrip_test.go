package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
)

// exportLine renders one line of "stated state export" for comparison.
func exportLine(r map[string]any) string {
	get := func(k string) string {
		v, ok := r[k]
		if !ok {
			return "-"
		}
		return fmt.Sprint(v)
	}
	return strings.Join([]string{get("operator"), get("subtask"), get("state"), get("kind"), get("keyGroup"),
		get("key"), get("namespace"), get("userKey"), get("value"), get("index"), get("number"), get("timestamp")}, " ")
}

// TestStateExportRoundTrip writes known state of every kind through a
// daemon on every backend kind (and changelog mode) into a local store,
// takes a checkpoint and a canonical savepoint, runs "stated state
// export" on both, and checks that the export equals the model line for
// line, binary bytes included.
func TestStateExportRoundTrip(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString
	states := []backend.StateDescriptor{
		{Name: "agg", Kind: backend.KindAggregate, Aggregate: backend.AggMax, Number: backend.NumFloat64},
		{Name: "list", Kind: backend.KindList},
		{Name: "map", Kind: backend.KindMap},
		{Name: "timers", Kind: backend.KindTimers},
		{Name: "val", Kind: backend.KindValue},
	}
	for _, c := range []struct {
		name       string
		kind       backend.Kind
		changelog  daemon.ChangelogMode
		checkpoint bool // the checkpoint is readable offline
	}{
		{"heap", backend.KindHeap, daemon.ChangelogOff, false},
		{"file", backend.KindFile, daemon.ChangelogOff, true},
		{"lsm", backend.KindLSM, daemon.ChangelogOff, true},
		{"lsm-changelog", backend.KindLSM, daemon.ChangelogOn, true},
		{"lsm-remote", backend.KindLSM, daemon.ChangelogOff, true},
		{"lsm-remote-changelog", backend.KindLSM, daemon.ChangelogOn, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			base := t.TempDir()
			root := filepath.Join(base, "checkpoints")
			n, err := host.Open(ctx, host.Options{DataDir: filepath.Join(base, "d"), CheckpointStore: "file://" + root,
				NoSocket: true, LSMRemote: strings.Contains(c.name, "remote"), Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			defer n.Close()
			d := n.Daemon()
			var want []string
			var ins []*daemon.Instance
			for sub := 0; sub < 2; sub++ {
				in, err := d.Open(ctx, daemon.OpenParams{Task: backend.TaskID{Job: "j", Operator: "op", Subtask: sub},
					KeyGroups: backend.KeyGroupRangeForOperator(64, 2, sub), MaxParallelism: 64, Kind: c.kind,
					States: states, Changelog: c.changelog})
				if err != nil {
					t.Fatal(err)
				}
				ins = append(ins, in)
				b := in.Backend
				for i := 0; i < 30; i++ {
					kg := in.KeyGroups.Start + (i*7)%in.KeyGroups.Len()
					key := []byte{0xff, byte(sub), byte(i)} // not UTF-8
					ns := []byte(fmt.Sprintf("w%d", i%2))
					k := backend.Key{KeyGroup: kg, Key: key, Namespace: ns}
					row := func(state, kind, uk, v, idx, num, ts string) {
						want = append(want, strings.Join([]string{"op", fmt.Sprint(sub), state, kind, fmt.Sprint(kg),
							b64(key), b64(ns), uk, v, idx, num, ts}, " "))
					}
					val := []byte(fmt.Sprintf(`{"n":%d}`, i))
					errs := []error{
						b.Put("val", k, val),
						b.ListAppend("list", k, []byte{}, []byte{byte(i), 0}),
						b.MapPut("map", k, []byte("b"), []byte{1}),
						b.MapPut("map", k, []byte("a"), []byte{}),
						b.AggregateAdd("agg", k, backend.Float64(float64(i)+0.5)),
						b.AggregateAdd("agg", k, backend.Float64(-1)),
						b.RegisterTimer("timers", backend.Timer{KeyGroup: kg, Key: key, Namespace: ns, Timestamp: -int64(i)}),
					}
					for _, err := range errs {
						if err != nil {
							t.Fatal(err)
						}
					}
					row("val", "value", "-", b64(val), "-", "-", "-")
					row("list", "list", "-", "", "0", "-", "-")
					row("list", "list", "-", b64([]byte{byte(i), 0}), "1", "-", "-")
					row("map", "map", b64([]byte("a")), "", "-", "-", "-")
					row("map", "map", b64([]byte("b")), b64([]byte{1}), "-", "-", "-")
					row("agg", "aggregate", "-", "-", "-", fmt.Sprint(float64(i)+0.5), "-")
					row("timers", "timers", "-", "-", "-", "-", fmt.Sprint(-int64(i)))
				}
			}
			for _, in := range ins {
				if _, err := d.Snapshot(ctx, in, 1, false); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := d.CompleteCheckpoint(ctx, "j", 1, nil); err != nil {
				t.Fatal(err)
			}
			sp, err := d.TriggerSavepoint(ctx, "j", false, 0)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(want)
			targets := []string{sp.Dir}
			if c.checkpoint {
				targets = append(targets, "j/latest")
			} else if _, err := runState(t, root, "export", "j/latest"); err == nil || !strings.Contains(err.Error(), "savepoint") {
				t.Errorf("export of a heap checkpoint: %v, want an error saying to read a savepoint", err)
			}
			for _, target := range targets {
				if got := exportParquet(t, root, target); !slices.Equal(got, want) {
					t.Errorf("parquet export %s: %d rows, want %d", target, len(got), len(want))
					for i := range min(len(got), len(want)) {
						if got[i] != want[i] {
							t.Fatalf("parquet export %s: first difference:\n got %s\nwant %s", target, got[i], want[i])
						}
					}
				}
				out := filepath.Join(t.TempDir(), "x.jsonl")
				if _, err := runState(t, root, "export", target, "-o", out); err != nil {
					t.Fatalf("export %s: %v", target, err)
				}
				f, err := os.Open(out)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				sc := bufio.NewScanner(f)
				for sc.Scan() {
					var r map[string]any
					if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
						t.Fatalf("export %s: line %q: %v", target, sc.Text(), err)
					}
					got = append(got, exportLine(r))
				}
				f.Close()
				slices.Sort(got)
				if !slices.Equal(got, want) {
					t.Errorf("export %s: %d lines, want %d", target, len(got), len(want))
					for i := range min(len(got), len(want)) {
						if got[i] != want[i] {
							t.Fatalf("export %s: first difference:\n got %s\nwant %s", target, got[i], want[i])
						}
					}
				}
			}
		})
	}
}

// exportParquet runs "stated state export --format parquet" on target,
// reads the file back with parquet-go's reader and renders each row as
// exportLine renders a JSON line, sorted.
func exportParquet(t *testing.T, root, target string) []string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "x.parquet")
	if _, err := runState(t, root, "export", target, "--format", "parquet", "-o", out); err != nil {
		t.Fatalf("export %s --format parquet: %v", target, err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pr := parquet.NewGenericReader[parquetRow](f)
	defer pr.Close()
	b64 := base64.StdEncoding.EncodeToString
	var got []string
	rows := make([]parquetRow, 100)
	for {
		n, err := pr.Read(rows)
		for _, p := range rows[:n] {
			r := map[string]any{"operator": p.Operator, "subtask": p.Subtask, "state": p.State, "kind": p.Kind,
				"keyGroup": p.KeyGroup, "key": b64(p.Key), "namespace": b64(p.Namespace)}
			switch p.Kind {
			case "map":
				r["userKey"] = b64(p.UserKey)
				r["value"] = b64(p.Value)
			case "value", "list":
				r["value"] = b64(p.Value)
			}
			if p.Index != nil {
				r["index"] = *p.Index
			}
			if p.NumberFloat != nil {
				r["number"] = *p.NumberFloat
			}
			if p.NumberInt != nil {
				r["number"] = *p.NumberInt
			}
			if p.Timestamp != nil {
				r["timestamp"] = *p.Timestamp
			}
			got = append(got, exportLine(r))
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("read parquet export of %s: %v", target, err)
		}
	}
	slices.Sort(got)
	return got
}
