package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/statedhq/stated/api/client"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/s3store"
	"github.com/statedhq/stated/tiered/s3store/s3test"
)

// served is a "stated serve" running in this process.
type served struct {
	cancel context.CancelFunc
	done   chan error
	sock   string
}

// startServe runs "stated serve args..." and waits until its socket
// answers.
func startServe(t *testing.T, sock string, args ...string) *served {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := newServeCmd()
	cmd.SetArgs(append([]string{"--socket", sock, "--metrics-addr", "", "--log-level", "warn"}, args...))
	s := &served{cancel: cancel, done: make(chan error, 1), sock: sock}
	go func() { s.done <- cmd.ExecuteContext(ctx) }()
	t.Cleanup(func() { s.stop(t) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case err := <-s.done:
			s.done <- err
			t.Fatalf("stated serve exited: %v", err)
		default:
		}
		// The socket file appears at bind, before the listen: wait until
		// it accepts.
		if conn, err := net.Dial("unix", sock); err == nil {
			conn.Close()
			return s
		}
		if time.Now().After(deadline) {
			t.Fatal("stated serve did not start listening within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop stops the daemon as SIGTERM would, once.
func (s *served) stop(t *testing.T) {
	t.Helper()
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("stated serve: %v", err)
		}
	case <-time.After(time.Minute):
		t.Error("stated serve did not stop within a minute")
	}
}

func runCLI(t *testing.T, cmd *cobra.Command, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

var s3States = []backend.StateDescriptor{{Name: "v", Kind: backend.KindValue}}

func s3Value(i int) []byte { return bytes.Repeat(fmt.Appendf(nil, "value-%d;", i), 40) }

// TestServeWithS3Flags runs "stated serve" against an S3 server configured
// by the S3 flags alone (the AWS_* environment is empty; the secret comes
// from STATED_S3_SECRET_ACCESS_KEY), checkpoints an lsm instance through
// the client and finds the checkpoint in the bucket; "stated checkpoints"
// and "stated verify" read it back with the same flags. Then the data
// files are deleted from the bucket: a restarted daemon still restores the
// instance, from its cache (local recovery); with the cache gone as well,
// the restore fails.
func TestServeWithS3Flags(t *testing.T) {
	so, _ := s3test.Options(t)
	for _, v := range []string{"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION",
		"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "STATED_CHECKPOINT_STORE"} {
		t.Setenv(v, "")
	}
	t.Setenv("STATED_S3_SECRET_ACCESS_KEY", so.SecretAccessKey)
	prefix := strings.Trim(so.Prefix+"/ckpt", "/")
	storeURL := "s3://" + so.Bucket + "/" + prefix
	s3args := []string{"--s3-endpoint", so.Endpoint, "--s3-region", so.Region, "--s3-path-style", "--s3-access-key-id", so.AccessKeyID}
	dataDir, err := os.MkdirTemp("", "sts3")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dataDir) })
	sock := filepath.Join(dataDir, "stated.sock")
	serveArgs := append([]string{"--data-dir", dataDir, "--checkpoint-store", storeURL}, s3args...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	d := startServe(t, sock, serveArgs...)
	c, err := client.Dial(sock, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	task := backend.TaskID{Job: "job", Operator: "op", Subtask: 0}
	spec := client.OpenSpec{Task: task, KeyGroups: backend.KeyGroupRange{Start: 0, End: 127}, Backend: backend.KindLSM, States: s3States}
	in, err := c.Open(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	const keys = 300
	for i := range keys {
		in.Put("v", fmt.Appendf(nil, "key-%d", i), nil, s3Value(i))
	}
	if _, err := in.Snapshot(ctx, 1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CompleteCheckpoint(ctx, "job", 1); err != nil {
		t.Fatal(err)
	}
	if err := in.Close(ctx); err != nil {
		t.Fatal(err)
	}
	d.stop(t)

	// The checkpoint is in the bucket, under the URL's prefix.
	raw := so
	raw.Prefix = prefix
	bucket, err := s3store.Open(ctx, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer bucket.Close()
	var data []string
	seen := map[string]bool{}
	err = tiered.Walk(ctx, bucket, "job/", func(o tiered.ObjectInfo) error {
		seen[o.Name] = true
		if strings.HasPrefix(o.Name, "job/shared/") {
			data = append(data, o.Name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !seen["job/chk-1/_metadata"] || !seen["job/_catalog"] || len(data) == 0 {
		t.Fatalf("bucket holds %v: no manifest, job file or shared data file of checkpoint 1", seen)
	}
	cacheDir := filepath.Join(dataDir, "cache")
	if n := countFiles(t, filepath.Join(cacheDir, "objects")); n < len(data) {
		t.Fatalf("the default cache %s holds %d files, fewer than the %d data files uploaded", cacheDir, n, len(data))
	}

	// The CLI reads it with the same flags; the endpoint from the
	// environment this time.
	t.Setenv("STATED_S3_ENDPOINT", so.Endpoint)
	cliArgs := []string{"--store", storeURL, "--s3-region", so.Region, "--s3-path-style", "--s3-access-key-id", so.AccessKeyID}
	out, err := runCLI(t, newCheckpointsCmd(), cliArgs...)
	if err != nil || !strings.Contains(out, "completed (retained)") {
		t.Fatalf("stated checkpoints: %v\n%s", err, out)
	}
	out, err = runCLI(t, newVerifyCmd(), append(cliArgs, "job/chk-1")...)
	if err != nil || !strings.Contains(out, "OK") {
		t.Fatalf("stated verify: %v\n%s", err, out)
	}
	out, err = runCLI(t, newGCCmd(), append(cliArgs, "--dry-run")...)
	if err != nil || !strings.Contains(out, "would delete 0 unreferenced objects") {
		t.Fatalf("stated gc --dry-run: %v\n%s", err, out)
	}

	// The bucket loses the data files; the cache still has them.
	if err := bucket.DeleteBatch(ctx, data); err != nil {
		t.Fatal(err)
	}
	restore := func() error {
		d := startServe(t, sock, serveArgs...)
		defer d.stop(t)
		spec := spec
		spec.Restore = &client.Restore{CheckpointID: 1}
		in, err := c.Open(ctx, spec)
		if err != nil {
			return err
		}
		defer in.Close(ctx)
		if got := in.RestoredCheckpoint(); got != 1 {
			return fmt.Errorf("restored checkpoint %d, want 1", got)
		}
		for i := range keys {
			v, err := in.Get("v", fmt.Appendf(nil, "key-%d", i), nil).Wait(ctx)
			if err != nil {
				return err
			}
			if !v.Found || !bytes.Equal(v.Data, s3Value(i)) {
				return fmt.Errorf("key %d: %q (found %v)", i, v.Data, v.Found)
			}
		}
		return nil
	}
	if err := restore(); err != nil {
		t.Fatalf("restore with the data files only in the local cache: %v", err)
	}
	if err := os.RemoveAll(cacheDir); err != nil {
		t.Fatal(err)
	}
	err = restore()
	if err == nil {
		t.Fatal("restore succeeded with the data files in neither the bucket nor the cache: the first restore proves nothing")
	}
	t.Logf("without the cache the restore fails as it should: %v", err)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatal(err)
	}
}

func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
