package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/storeurl"
)

// defaultCLIStore is the checkpoint store of "stated serve" with its
// default --data-dir.
const defaultCLIStore = "./stated-data/checkpoints"

// storeFlag adds --store to cmd; its default is $STATED_CHECKPOINT_STORE
// (the variable "stated serve" reads too), then defaultCLIStore.
func storeFlag(cmd *cobra.Command, dst *string) {
	def := defaultCLIStore
	if v := os.Getenv("STATED_CHECKPOINT_STORE"); v != "" {
		def = v
	}
	cmd.Flags().StringVar(dst, "store", def, "checkpoint storage: a directory, file:///dir or s3://bucket/prefix (env STATED_CHECKPOINT_STORE)")
}

// openCLIStore opens the checkpoint store for a CLI command. A local
// directory is opened directly, not through localfs.Open, which would clear
// the temporary files of a daemon running on the same directory; writable
// says whether deletes are allowed (stated gc). Nothing here ever writes.
func openCLIStore(ctx context.Context, raw string, writable bool) (tiered.Store, error) {
	loc, err := storeurl.Parse(raw)
	if err != nil {
		return nil, err
	}
	if loc.Scheme == "file" {
		fi, err := os.Stat(loc.Path)
		if err != nil {
			return nil, fmt.Errorf("checkpoint store %s: %w", loc.Path, err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("checkpoint store %s is not a directory", loc.Path)
		}
		return &dirStore{root: loc.Path, writable: writable}, nil
	}
	return storeurl.Open(ctx, raw, storeurl.Options{})
}

// dirStore reads (and, if writable, deletes) objects of a local checkpoint
// directory laid out as localfs writes it. It never creates anything.
type dirStore struct {
	root     string
	writable bool
}

var errReadOnly = errors.New("stated: the store is opened read-only")

func (d *dirStore) path(name string) (string, error) {
	if err := tiered.ValidateName(name); err != nil {
		return "", err
	}
	if name == ".tmp" || strings.HasPrefix(name, ".tmp/") {
		return "", fmt.Errorf("%w: %q is a temporary file", tiered.ErrInvalidName, name)
	}
	return filepath.Join(d.root, filepath.FromSlash(name)), nil
}

func (d *dirStore) Put(context.Context, string, io.Reader, int64) error { return errReadOnly }
func (d *dirStore) PutIfAbsent(context.Context, string, io.Reader, int64) error {
	return errReadOnly
}

func (d *dirStore) open(name string) (*os.File, os.FileInfo, error) {
	p, err := d.path(name)
	if err != nil {
		return nil, nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("%s: %w", name, tiered.ErrNotFound)
	}
	if err != nil {
		return nil, nil, err
	}
	fi, err := f.Stat()
	if err == nil && fi.IsDir() {
		err = fmt.Errorf("%s: %w (a directory)", name, tiered.ErrNotFound)
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, fi, nil
}

func (d *dirStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	f, _, err := d.open(name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

type sectionFile struct {
	*io.SectionReader
	f *os.File
}

func (s sectionFile) Close() error { return s.f.Close() }

func (d *dirStore) GetRange(ctx context.Context, name string, off, n int64) (io.ReadCloser, error) {
	f, fi, err := d.open(name)
	if err != nil {
		return nil, err
	}
	if off < 0 || off > fi.Size() {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, tiered.ErrInvalidRange)
	}
	if n < 0 || off+n > fi.Size() {
		n = fi.Size() - off
	}
	return sectionFile{io.NewSectionReader(f, off, n), f}, nil
}

func (d *dirStore) Stat(ctx context.Context, name string) (tiered.ObjectInfo, error) {
	f, fi, err := d.open(name)
	if err != nil {
		return tiered.ObjectInfo{}, err
	}
	f.Close()
	return tiered.ObjectInfo{Name: name, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

func (d *dirStore) List(ctx context.Context, prefix, startAfter string, limit int) (tiered.ListPage, error) {
	if limit <= 0 {
		limit = 1000
	}
	base := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		base = prefix[:i]
	}
	var objs []tiered.ObjectInfo
	err := filepath.WalkDir(filepath.Join(d.root, filepath.FromSlash(base)), func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, _ := filepath.Rel(d.root, p)
		rel = filepath.ToSlash(rel)
		if e.IsDir() {
			if rel == ".tmp" || (rel != "." && !strings.HasPrefix(rel+"/", prefix) && !strings.HasPrefix(prefix, rel+"/")) {
				return fs.SkipDir
			}
			return nil
		}
		if !strings.HasPrefix(rel, prefix) || rel <= startAfter {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return nil // deleted while listing
		}
		objs = append(objs, tiered.ObjectInfo{Name: rel, Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return tiered.ListPage{}, fmt.Errorf("list %q: %w", prefix, err)
	}
	sort.Slice(objs, func(i, j int) bool { return objs[i].Name < objs[j].Name })
	var page tiered.ListPage
	if len(objs) > limit {
		objs = objs[:limit]
		page.Next = objs[limit-1].Name
	}
	page.Objects = objs
	return page, nil
}

func (d *dirStore) Delete(ctx context.Context, name string) error {
	return d.DeleteBatch(ctx, []string{name})
}

func (d *dirStore) DeleteBatch(ctx context.Context, names []string) error {
	if !d.writable {
		return errReadOnly
	}
	var errs []error
	for _, n := range names {
		p, err := d.path(n)
		if err == nil {
			err = os.Remove(p)
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		// Remove directories the delete emptied, as localfs does.
		for dir := filepath.Dir(p); dir != d.root && strings.HasPrefix(dir, d.root); dir = filepath.Dir(dir) {
			if os.Remove(dir) != nil {
				break
			}
		}
	}
	return errors.Join(errs...)
}

func (d *dirStore) Close() error { return nil }

var _ tiered.Store = (*dirStore)(nil)

func newVerifyCmd() *cobra.Command {
	var store string
	cmd := &cobra.Command{
		Use:   "verify <checkpoint-or-savepoint-dir>",
		Short: "Re-read every file of a checkpoint or savepoint and check every checksum",
		Long: `Verify reads the manifest (_metadata) of a checkpoint or savepoint, then re-reads
every file of every task handle and checks its size and CRC32C. It lists every
missing or corrupt file and exits non-zero if there is one.

The argument is a local directory: a checkpoint "<root>/<job>/chk-<N>" (its files
are read relative to <root>) or a savepoint directory, wherever it was moved to.
With --store, the argument is instead a name inside that store: "<job>/chk-<N>"
or "savepoints/<id>".`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runVerify(cmd.Context(), cmd.OutOrStdout(), args[0], store, cmd.Flags().Changed("store"))
		},
	}
	storeFlag(cmd, &store)
	return cmd
}

func init() { rootCmd.AddCommand(newVerifyCmd()) }

func runVerify(ctx context.Context, out io.Writer, target, storeURL string, inStore bool) error {
	if ctx == nil {
		ctx = context.Background()
	}
	var s tiered.Store
	var dir string
	var err error
	if inStore {
		if s, err = openCLIStore(ctx, storeURL, false); err != nil {
			return err
		}
		dir = strings.Trim(target, "/")
	} else {
		root, d, err := catalog.ResolveVerifyPath(filepath.ToSlash(filepath.Clean(target)), func(p string) ([]byte, error) {
			return os.ReadFile(filepath.FromSlash(p))
		})
		if err != nil {
			return err
		}
		s, dir = &dirStore{root: filepath.FromSlash(root)}, d
	}
	defer s.Close()
	rep, err := catalog.Verify(ctx, s, dir, 0)
	if err != nil {
		return err
	}
	m := rep.Manifest
	what := fmt.Sprintf("checkpoint %d of job %s", m.CheckpointID, m.Job)
	if m.Kind == catalog.KindSavepoint {
		what = fmt.Sprintf("%s savepoint %s of job %s (checkpoint %d)", m.Format, m.SavepointID, m.Job, m.CheckpointID)
	}
	fmt.Fprintf(out, "%s: %d tasks, %d files, %s\n", what, len(m.Tasks), rep.Files, humanBytes(rep.Bytes))
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

// humanBytes formats a byte count with a binary unit.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
