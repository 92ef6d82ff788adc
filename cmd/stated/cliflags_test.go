package main

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/smithy-go/logging"
	"github.com/spf13/cobra"
)

// TestCLIStoreResolution: checkpoints, verify and gc find the checkpoint
// store as "stated serve" does: --checkpoint-store, STATED_CHECKPOINT_STORE,
// the deprecated --store, else <data-dir>/checkpoints with --data-dir or
// STATED_DATA_DIR, made absolute.
func TestCLIStoreResolution(t *testing.T) {
	dir := t.TempDir()
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	cases := []struct {
		name     string
		env      map[string]string
		args     []string
		want     string
		explicit bool
		err      string
	}{
		{name: "default", want: "file://" + abs("stated-data/checkpoints")},
		{name: "data-dir flag", args: []string{"--data-dir", dir}, want: "file://" + filepath.Join(dir, "checkpoints")},
		{name: "data-dir env", env: map[string]string{"STATED_DATA_DIR": dir}, want: "file://" + filepath.Join(dir, "checkpoints")},
		{name: "flag beats env", env: map[string]string{"STATED_DATA_DIR": "/nowhere"}, args: []string{"--data-dir", dir},
			want: "file://" + filepath.Join(dir, "checkpoints")},
		{name: "checkpoint-store", args: []string{"--data-dir", dir, "--checkpoint-store", "s3://b/p"}, want: "s3://b/p", explicit: true},
		{name: "checkpoint-store env", env: map[string]string{"STATED_CHECKPOINT_STORE": "file:///x"}, want: "file:///x", explicit: true},
		{name: "deprecated store", args: []string{"--store", "/old"}, want: "/old", explicit: true},
		{name: "deprecated store beats env", env: map[string]string{"STATED_CHECKPOINT_STORE": "file:///x"}, args: []string{"--store", "/old"},
			want: "/old", explicit: true},
		{name: "both disagree", args: []string{"--store", "/a", "--checkpoint-store", "/b"}, err: "disagree"},
		{name: "empty data dir", args: []string{"--data-dir", ""}, err: "--data-dir is empty"},
		{name: "memory store", args: []string{"--checkpoint-store", "mem://"}, err: "--checkpoint-store mem://: an in-memory store is for tests only"},
		{name: "memory changelog store", args: []string{"--changelog-store", "mem://x"}, err: "--changelog-store mem://x: an in-memory store is for tests only"},
	}
	for _, c := range cases {
		for name, mk := range map[string]func(*cliStore) *cobra.Command{
			"checkpoints": func(st *cliStore) *cobra.Command { return storeCmd(st) },
		} {
			t.Run(c.name+"/"+name, func(t *testing.T) {
				for _, k := range []string{"STATED_DATA_DIR", "STATED_CHECKPOINT_STORE"} {
					t.Setenv(k, "")
					os.Unsetenv(k)
				}
				for k, v := range c.env {
					t.Setenv(k, v)
				}
				var st cliStore
				cmd := mk(&st)
				if err := cmd.ParseFlags(c.args); err != nil {
					t.Fatal(err)
				}
				err := cmd.PreRunE(cmd, nil)
				if c.err != "" {
					if err == nil || !strings.Contains(err.Error(), c.err) {
						t.Fatalf("error %v, want %q", err, c.err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if st.url != c.want || st.explicit != c.explicit {
					t.Fatalf("store %q explicit %v, want %q %v", st.url, st.explicit, c.want, c.explicit)
				}
			})
		}
	}
}

// storeCmd is a bare command with the store flags.
func storeCmd(st *cliStore) *cobra.Command {
	cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
	storeFlags(cmd, st)
	return cmd
}

// TestCLICommandsReadTheDaemonsStore runs checkpoints, gc and verify as a
// user would, with only STATED_DATA_DIR set: each reads that data dir's
// store, says so on stderr, and none reads ./stated-data.
func TestCLICommandsReadTheDaemonsStore(t *testing.T) {
	root, _ := realCheckpoints(t, 2)
	dataDir := filepath.Dir(root)
	t.Setenv("STATED_DATA_DIR", dataDir)
	t.Setenv("STATED_CHECKPOINT_STORE", "")
	os.Unsetenv("STATED_CHECKPOINT_STORE")
	t.Chdir(t.TempDir()) // no ./stated-data here

	run := func(cmd *cobra.Command, args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		cmd.SetArgs(args)
		cmd.SetOut(&out)
		cmd.SetErr(&errOut)
		err := cmd.Execute()
		return out.String(), errOut.String(), err
	}
	wantStore := "reading checkpoint store file://" + root
	out, errOut, err := run(newCheckpointsCmd())
	if err != nil || !strings.Contains(out, "job j") || !strings.Contains(errOut, wantStore) {
		t.Fatalf("checkpoints: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	out, errOut, err = run(newVerifyCmd(), "j/chk-2")
	if err != nil || !strings.Contains(out, "OK") || !strings.Contains(errOut, wantStore) {
		t.Fatalf("verify: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	out, errOut, err = run(newGCCmd(), "--dry-run")
	if err != nil || !strings.Contains(out, "would delete") || !strings.Contains(errOut, wantStore) {
		t.Fatalf("gc: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	// Another data dir that holds no store: an error that names the fix,
	// not an empty listing.
	_, _, err = run(newCheckpointsCmd(), "--data-dir", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "--data-dir") {
		t.Fatalf("checkpoints of an empty data dir: %v", err)
	}
}

// TestCLISDKWarningsAreStructured: the AWS SDK's warnings reach the CLI's
// stderr as slog lines with component=aws.
func TestCLISDKWarningsAreStructured(t *testing.T) {
	var buf bytes.Buffer
	o := cliS3Options(s3Flags{}, &buf)
	if o.S3.Logger == nil {
		t.Fatal("no SDK logger")
	}
	o.S3.Logger.Logf(logging.Warn, "Response has no supported checksum. Not validating response payload.")
	o.S3.Logger.Logf(logging.Debug, "retrying")
	got := buf.String()
	if !strings.Contains(got, "level=WARN") || !strings.Contains(got, "component=aws") ||
		!strings.Contains(got, "no supported checksum") || strings.Contains(got, "retrying") {
		t.Fatalf("stderr:\n%s", got)
	}
}

// TestServeRefusesBeforeCreatingTheDataDir: "stated serve" with a socket
// path over the kernel's limit, or a metrics port in use, fails naming
// the flags, and leaves no data dir behind.
func TestServeRefusesBeforeCreatingTheDataDir(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	base := t.TempDir()
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"--data-dir", filepath.Join(base, strings.Repeat("d", 120))}, []string{"--socket", "--data-dir", "limit"}},
		{[]string{"--data-dir", filepath.Join(base, "m"), "--metrics-addr", taken.Addr().String()}, []string{"--metrics-addr", "in use"}},
	}
	for _, c := range cases {
		cmd := newServeCmd()
		cmd.SetArgs(append(c.args, "--log-level", "warn"))
		cmd.SetOut(io.Discard)
		err := cmd.Execute()
		if err == nil {
			t.Fatalf("%v: served", c.args)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v does not say %s", c.args, err, w)
			}
		}
		if _, serr := os.Stat(c.args[1]); !errors.Is(serr, fs.ErrNotExist) {
			t.Errorf("%v: the data dir exists (%v)", c.args, serr)
		}
	}
}
