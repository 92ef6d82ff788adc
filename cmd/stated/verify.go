package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/internal/bytesize"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/localfs"
)

func newVerifyCmd() *cobra.Command {
	var store cliStore
	cmd := &cobra.Command{
		Use:   "verify <job>[/latest] | <job>/chk-<N> | savepoints/<id> | <local-dir>",
		Short: "Re-read every file of a checkpoint or savepoint and check every checksum",
		Long: `Verify reads the manifest (_metadata) of a checkpoint or savepoint, then re-reads
every file of every task handle and checks its size and CRC32C. The SSTs of an
lsm instance in remote mode (--lsm-remote) have no CRC in their handles: verify
reads them block by block with ranged reads and checks every block checksum
Pebble wrote. It lists every missing or corrupt file and exits non-zero if
there is one.

The argument is a name inside the checkpoint store: "<job>/chk-<N>",
"savepoints/<id>", or "<job>/latest" (also just "<job>") for the newest
retained checkpoint the job owns; "stated checkpoints" lists the ids. The store is the daemon's, found as "stated serve" finds it:
--checkpoint-store (or STATED_CHECKPOINT_STORE), else <data-dir>/checkpoints
with --data-dir (or STATED_DATA_DIR, default ./stated-data).

When no store is named and the argument is an existing local directory, it is
read from there instead: a checkpoint "<root>/<job>/chk-<N>" (its files are read
relative to <root>) or a savepoint directory, wherever it was moved to.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			inStore := store.explicit || !isDir(args[0])
			if inStore {
				store.announce(cmd.ErrOrStderr())
			} else {
				fmt.Fprintf(cmd.ErrOrStderr(), "reading the local directory %s\n", args[0])
			}
			return runVerify(cmd.Context(), cmd.OutOrStdout(), args[0], store, inStore, stderrProgress())
		},
	}
	storeFlags(cmd, &store)
	return cmd
}

func init() { rootCmd.AddCommand(newVerifyCmd()) }

// manifestBytes is the size of the files the manifest in dir lists, for
// verify's progress; 0 when it cannot be read (Verify then says why).
func manifestBytes(ctx context.Context, s tiered.Store, dir string) int64 {
	name := catalog.ManifestName
	if dir != "" {
		name = strings.TrimSuffix(dir, "/") + "/" + name
	}
	data, err := tiered.ReadAll(ctx, s, name, 64<<20)
	if err != nil {
		return 0
	}
	m, err := catalog.DecodeManifest(data)
	if err != nil {
		return 0
	}
	var n int64
	for _, h := range m.Tasks {
		for _, f := range h.Files {
			n += f.Size
		}
	}
	return n
}

// isDir reports whether p is an existing directory.
func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

func runVerify(ctx context.Context, out io.Writer, target string, store cliStore, inStore bool, prog progressOpts) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var s tiered.Store
	var dir string
	var err error
	if inStore {
		if s, err = openCLIStore(ctx, store, false); err != nil {
			return err
		}
		if dir, err = resolveVerifyTarget(ctx, s, strings.Trim(target, "/"), store.url); err != nil {
			s.Close()
			return err
		}
	} else {
		root, d, err := catalog.ResolveVerifyPath(filepath.ToSlash(filepath.Clean(target)), func(p string) ([]byte, error) {
			return os.ReadFile(filepath.FromSlash(p))
		})
		if err != nil {
			return err
		}
		ro, err := localfs.OpenWith(filepath.FromSlash(root), localfs.Options{ReadOnly: true})
		if err != nil {
			return err
		}
		s, dir = ro, d
	}
	defer s.Close()
	logStore, err := openCLILogStore(ctx, store, false)
	if err != nil {
		return err
	}
	if logStore == nil {
		logStore = s
	} else {
		defer logStore.Close()
	}
	// Count what is read, against the files the manifest lists.
	cs := &countingStore{Store: s}
	cl := cs
	if logStore != s {
		cl = &countingStore{Store: logStore}
	}
	total := manifestBytes(ctx, s, dir)
	stop := prog.start("verify "+dir, total, func() (int64, string) {
		n := cs.read.Load()
		if cl != cs {
			n += cl.read.Load()
		}
		return n, readText(n, total)
	})
	rep, err := catalog.VerifyWithLog(ctx, cs, cl, dir, 0)
	stop()
	if err != nil {
		if inStore && errors.Is(err, catalog.ErrNotFound) {
			return fmt.Errorf("%s has no manifest in %s (%w): \"stated checkpoints\" lists the retained checkpoints and savepoints of this store, and \"<job>/latest\" names a job's newest", dir, store.url, err)
		}
		return err
	}
	m := rep.Manifest
	what := fmt.Sprintf("checkpoint %d of job %s", m.CheckpointID, m.Job)
	if m.Kind == catalog.KindSavepoint {
		what = fmt.Sprintf("%s savepoint %s of job %s (checkpoint %d)", m.Format, m.SavepointID, m.Job, m.CheckpointID)
	}
	fmt.Fprintf(out, "%s: %d tasks, %d files, %s\n", what, len(m.Tasks), rep.Files, bytesize.Format(rep.Bytes))
	if rep.Skipped > 0 {
		fmt.Fprintf(out, "%d files of heap snapshots skipped (they live in the daemon's memory)\n", rep.Skipped)
	}
	if rep.OK() {
		fmt.Fprintln(out, "OK: every file present, every checksum matches")
		return nil
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FILE\tTASK\tPROBLEM")
	for _, p := range rep.Problems {
		problem := p.Detail
		if p.Missing {
			problem = "missing"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", p.Path, p.Task, problem)
	}
	tw.Flush()
	return fmt.Errorf("verify: %d of %d files missing or corrupt", len(rep.Problems), rep.Files)
}

// resolveVerifyTarget turns verify's argument into a directory of the
// store: "<job>/latest" and a bare "<job>" name the newest retained
// checkpoint the job owns (checkpoint ids are chosen by the engine, often
// time-based, so an operator rarely knows one by heart); every other name
// ("<job>/chk-<N>", "savepoints/<id>") passes unchanged.
func resolveVerifyTarget(ctx context.Context, s tiered.Store, target, storeURL string) (string, error) {
	job, rest, hasSlash := strings.Cut(target, "/")
	if hasSlash && rest != "latest" {
		return target, nil
	}
	if err := catalog.ValidateJob(job); err != nil {
		return "", fmt.Errorf("verify %q: %w (give <job>/chk-<N>, <job>/latest or savepoints/<id>)", target, err)
	}
	// Open only reads, as "stated checkpoints" does.
	c, err := catalog.Open(ctx, catalog.Options{Store: s})
	if err != nil {
		return "", err
	}
	defer c.Close()
	m, ok := c.Latest(job)
	if !ok {
		return "", fmt.Errorf("job %s has no retained checkpoint in %s: \"stated checkpoints\" lists the jobs and checkpoints of this store", job, storeURL)
	}
	return catalog.CheckpointDir(m.Job, m.CheckpointID), nil
}
