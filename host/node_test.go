package host_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/host"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/s3store"
	"github.com/statedhq/stated/tiered/storeurl"
)

// recorder is a slog.Handler that keeps every record.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// find returns the records with message msg (any, when "") whose
// attribute key has value val.
func (r *recorder) find(msg, key, val string) []slog.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []slog.Record
	for _, rec := range r.recs {
		if msg != "" && rec.Message != msg {
			continue
		}
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == key && a.Value.String() == val {
				out = append(out, rec)
				return false
			}
			return true
		})
	}
	return out
}

func attr(rec slog.Record, key string) string {
	var v string
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

// metric returns the value of the counter or gauge name with the label
// values labels (in order), from the node's registry.
func metric(t *testing.T, n *host.Host, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for i, l := range m.GetLabel() {
				if l.GetValue() != labels[i] {
					continue next
				}
			}
			return m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s%v", name, labels)
	return 0
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

var valueState = []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}

// TestOpenServeShutdown: a node serves the API on its socket (mode 0600)
// and on TCP with its token, /metrics and /healthz on its metrics
// address; Shutdown removes the socket and releases the data dir, which
// a second node then opens.
func TestOpenServeShutdown(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := host.Options{DataDir: filepath.Join(dir, "d"), Listen: "127.0.0.1:0", Token: "secret",
		MetricsAddr: "127.0.0.1:0", Logger: quiet()}
	n, err := host.Open(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	sock := n.Socket()
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v %v", sock, fi, err)
	}
	if _, err := host.Open(ctx, opts); err == nil || !strings.Contains(err.Error(), "locked") {
		t.Fatalf("a second node on the same data dir: %v", err)
	}
	c, err := client.Dial(sock, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	task := backend.TaskID{Job: "j", Operator: "op"}
	in, err := c.Open(ctx, client.OpenSpec{Task: task, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127},
		Backend: backend.KindHeap, States: valueState})
	if err != nil {
		t.Fatal(err)
	}
	_ = in.Close(ctx)
	_ = c.Close()
	if got := metric(t, n, "stated_instance_opens_total"); got != 1 {
		t.Fatalf("stated_instance_opens_total %v, want 1", got)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + n.MetricsAddr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "stated_instance_opens_total 1") ||
		!strings.Contains(body, `stated_corruption_detected_total{where="restore"} 0`) ||
		!strings.Contains(body, `stated_build_info{go_version="`+runtime.Version()+`"`) {
		t.Fatalf("/metrics %d:\n%s", code, body)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz %d", code)
	}
	if n.TCPAddr() == nil {
		t.Fatal("no TCP address")
	}
	if err := n.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatalf("Close after Shutdown: %v", err)
	}
	if _, err := os.Stat(sock); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("socket after shutdown: %v", err)
	}
	n2, err := host.Open(ctx, opts)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if err := n2.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestInjectedListener: with Options.Listener the local API is served
// there (no socket of the node's own), and Shutdown closes it.
func TestInjectedListener(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "own.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := host.Open(ctx, host.Options{DataDir: filepath.Join(dir, "d"), Listener: ln, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	if n.Socket() != "" {
		t.Fatalf("socket %q with an injected listener", n.Socket())
	}
	if _, err := os.Stat(filepath.Join(dir, "d", host.SocketName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the node made its own socket: %v", err)
	}
	c, err := client.Dial(path, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListCheckpoints(ctx, "j"); err != nil {
		t.Fatalf("call on the injected listener: %v", err)
	}
	_ = c.Close()
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := ln.Accept(); err == nil {
		t.Fatal("the injected listener still accepts after Close")
	}
}

// TestReadParallelismReachesTheServer: the node hands ReadParallelism to
// its API server, and 0 means one goroutine per CPU.
func TestReadParallelismReachesTheServer(t *testing.T) {
	for _, c := range []struct{ set, want int }{{3, 3}, {0, runtime.GOMAXPROCS(0)}} {
		nd, err := host.Open(context.Background(), host.Options{DataDir: t.TempDir(), Store: memstore.New(), ReadParallelism: c.set,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		got := nd.Server().Options().ReadParallelism
		_ = nd.Close()
		if got != c.want {
			t.Fatalf("ReadParallelism %d: the server reads with %d, want %d", c.set, got, c.want)
		}
	}
}

// TestValidateReportsEveryProblem: Validate names every bad field at once.
func TestValidateReportsEveryProblem(t *testing.T) {
	o := host.Options{Listen: "127.0.0.1:1", MaxValueSize: 12 << 20, QueueDepth: -1, FirstBatchTimeout: -time.Second, ReadParallelism: -1,
		FileCompression: "lz4", Store: memstore.New(), CheckpointStore: "file:///x",
		S3: storeurl.Options{Endpoint: "ftp://x", AccessKeyID: "k"}}
	o.EnsureDefaults()
	err := o.Validate()
	for _, want := range []string{"Token", "half of MaxMessageSize", "QueueDepth", "FirstBatchTimeout", "ReadParallelism", "FileCompression",
		"both Store and CheckpointStore", "S3.Endpoint", "S3.AccessKeyID"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v; want a problem mentioning %q", err, want)
		}
	}
	ok := host.Options{DataDir: t.TempDir()}
	ok.EnsureDefaults()
	if err := ok.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if ok.Socket != filepath.Join(ok.DataDir, host.SocketName) || ok.ShutdownGrace != host.DefaultShutdownGrace ||
		ok.Retain != catalog.DefaultRetain || !strings.HasPrefix(ok.CheckpointStore, "file:///") {
		t.Fatalf("defaults %+v", ok)
	}
}

// TestCorruptionIsCountedAndLogged: a checkpoint file damaged in the store
// fails the restore with ErrCorrupt, increments
// stated_corruption_detected_total{where="restore"} and logs an error
// event that names the task, the checkpoint and the checksum mismatch.
func TestCorruptionIsCountedAndLogged(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	dir := t.TempDir()
	n, err := host.Open(ctx, host.Options{DataDir: dir, NoSocket: true, Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	d := n.Daemon()
	task, kg := checkpointOne(t, n)
	// Flip one byte in the middle of every data file of the checkpoint
	// (the size stays, so only a checksum can tell).
	root := filepath.Join(dir, "checkpoints")
	damaged := 0
	err = filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if catalog.IsMetadata(filepath.ToSlash(rel)) || !strings.HasPrefix(rel, "job"+string(filepath.Separator)) {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil || len(b) == 0 {
			return err
		}
		b[len(b)/2] ^= 0xff
		damaged++
		return os.WriteFile(p, b, 0o600)
	})
	if err != nil || damaged == 0 {
		t.Fatalf("damage: %d files, %v", damaged, err)
	}
	if got := metric(t, n, "stated_corruption_detected_total", "restore"); got != 0 {
		t.Fatalf("corruption counted before the restore: %v", got)
	}
	_, err = d.Open(ctx, daemon.OpenParams{Task: task, KeyGroups: kg, Kind: backend.KindFile, States: valueState,
		Restore: &daemon.RestoreSpec{Latest: true}})
	if !errors.Is(err, backend.ErrCorrupt) {
		t.Fatalf("restore of a damaged checkpoint: %v, want ErrCorrupt", err)
	}
	if got := metric(t, n, "stated_corruption_detected_total", "restore"); got != 1 {
		t.Fatalf("stated_corruption_detected_total{where=restore} = %v, want 1", got)
	}
	if got := metric(t, n, "stated_corruption_detected_total", "catalog"); got != 0 {
		t.Fatalf("stated_corruption_detected_total{where=catalog} = %v, want 0", got)
	}
	evs := rec.find("corruption detected", "where", "restore")
	if len(evs) != 1 {
		t.Fatalf("%d corruption events, want 1", len(evs))
	}
	ev := evs[0]
	if ev.Level != slog.LevelError || attr(ev, "task") != task.String() || attr(ev, "source") != "checkpoint 1 of job job" ||
		!strings.Contains(attr(ev, "err"), "checksum mismatch") || !strings.Contains(attr(ev, "err"), "job/chk-1/") {
		t.Fatalf("event %s %q: task %q source %q err %q", ev.Level, ev.Message, attr(ev, "task"), attr(ev, "source"), attr(ev, "err"))
	}
}

// checkpointOne writes 50 entries into a file instance of job "job" and
// completes checkpoint 1 of it, then closes the instance.
func checkpointOne(t *testing.T, n *host.Host) (backend.TaskID, backend.KeyGroupRange) {
	t.Helper()
	ctx := context.Background()
	d := n.Daemon()
	task := backend.TaskID{Job: "job", Operator: "op"}
	kg := backend.KeyGroupRange{Start: 0, End: 127}
	in, err := d.Open(ctx, daemon.OpenParams{Task: task, KeyGroups: kg, Kind: backend.KindFile, States: valueState})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 50 {
		if err := in.Backend.Put("v", backend.Key{KeyGroup: i % 128, Key: []byte{byte(i)}}, []byte("value")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.Snapshot(ctx, in, 1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CompleteCheckpoint(ctx, "job", 1, nil); err != nil {
		t.Fatal(err)
	}
	if err := d.CloseInstance(in.ID, "job"); err != nil {
		t.Fatal(err)
	}
	return task, kg
}

// TestDamagedManifestIsCountedAtOpen: a checkpoint's _metadata damaged in
// the store while the node was down is a catalog problem when the node
// opens again, and counted and logged as corruption where="catalog".
func TestDamagedManifestIsCountedAtOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	n, err := host.Open(ctx, host.Options{DataDir: dir, NoSocket: true, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	checkpointOne(t, n)
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "checkpoints", "job", "chk-1", "_metadata")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x10
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	n, err = host.Open(ctx, host.Options{DataDir: dir, NoSocket: true, Logger: slog.New(rec)})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if got := metric(t, n, "stated_corruption_detected_total", "catalog"); got != 1 {
		t.Fatalf("stated_corruption_detected_total{where=catalog} = %v, want 1", got)
	}
	evs := rec.find("corruption detected", "where", "catalog")
	if len(evs) != 1 || attr(evs[0], "job") != "job" || !strings.Contains(attr(evs[0], "source"), "job/chk-1/_metadata") {
		t.Fatalf("corruption events %+v", evs)
	}
}

// TestSDKLogsThroughSlog: the AWS SDK's messages (here its retries of a
// failing S3 endpoint) arrive in the node's slog handler.
func TestSDKLogsThroughSlog(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	rec := &recorder{}
	_, err := host.Open(context.Background(), host.Options{DataDir: t.TempDir(), NoSocket: true, Logger: slog.New(rec),
		CheckpointStore: "s3://bucket/prefix",
		S3: storeurl.Options{Endpoint: srv.URL, Region: "us-east-1", AccessKeyID: "k", SecretAccessKey: "s",
			S3: s3store.Options{MaxAttempts: 3, MaxBackoff: time.Millisecond}}})
	if err == nil {
		t.Fatal("a node opened on a failing S3 endpoint")
	}
	if got := rec.find("", "component", "aws"); len(got) == 0 {
		t.Fatalf("no AWS SDK message reached the slog handler (%d records)", len(rec.recs))
	}
}
