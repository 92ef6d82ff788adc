package catalog

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"strings"
	"sync"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/backend/tablecheck"
	"github.com/statedhq/stated/internal/frame"
	"github.com/statedhq/stated/tiered"
)

func crc32Update(crc uint32, p []byte) uint32 { return crc32.Update(crc, frame.Table(), p) }

// FileProblem is one file of a manifest that failed verification.
type FileProblem struct {
	// Path is the object name as the verifier read it.
	Path string
	// Task is the task whose handle lists it.
	Task backend.TaskID
	// Missing: the object does not exist. Otherwise Detail says what is
	// wrong (size, checksum, read error).
	Missing bool
	Detail  string
	// Pack is the object that holds a packed file's bytes (its range in
	// it), "" for a file that is an object of its own: the Path of a
	// packed file is not an object an operator can find in the store.
	Pack string
}

func (p FileProblem) String() string {
	where := fmt.Sprintf("%s (task %s)", p.Path, p.Task)
	if p.Pack != "" {
		where = fmt.Sprintf("%s (task %s, %s)", p.Path, p.Task, p.Pack)
	}
	if p.Missing {
		return where + ": missing"
	}
	return where + ": " + p.Detail
}

// VerifyReport is the result of Verify.
type VerifyReport struct {
	// Manifest is the decoded manifest (nil if it could not be read).
	Manifest *Manifest
	// Files and Bytes count the files read back and their bytes.
	Files int
	Bytes int64
	// Skipped counts files not in the store by design (heap snapshots live
	// in the daemon's memory).
	Skipped int
	// Problems lists every missing or damaged file, sorted by path.
	Problems []FileProblem
}

// OK reports whether every file was present and intact.
func (r *VerifyReport) OK() bool { return r.Manifest != nil && len(r.Problems) == 0 }

// Verify reads the manifest "<dir>/_metadata" from store and re-reads every
// file of every handle, checking its size and CRC32C, or for a size-only
// file (an lsm SST of remote mode) every block checksum of the SST
// (tablecheck.Validate). For a checkpoint, dir
// is "<job>/chk-<N>" and store the checkpoint root (handle paths are
// relative to it); for a savepoint, dir is its directory in store ("" when
// store is rooted at the savepoint). A manifest that cannot be read or
// decoded is an error; missing and damaged files are listed in the report.
// parallelism bounds concurrent reads (<= 0: 4).
func Verify(ctx context.Context, store tiered.Store, dir string, parallelism int) (*VerifyReport, error) {
	return VerifyWithLog(ctx, store, store, dir, parallelism)
}

// VerifyWithLog is Verify that also reads back every changelog segment the
// handles list (Handle.Log) from logStore, the daemon's --changelog-store
// (or the checkpoint store), verifying each whole segment's every
// checksum: a checkpoint in changelog mode restores only with them.
func VerifyWithLog(ctx context.Context, store, logStore tiered.Store, dir string, parallelism int) (*VerifyReport, error) {
	name := ManifestName
	if dir != "" {
		name = strings.TrimSuffix(dir, "/") + "/" + ManifestName
	}
	data, err := tiered.ReadAll(ctx, store, name, maxMetaSize)
	if tiered.IsNotFound(err) {
		return nil, fmt.Errorf("%w: manifest %s: %v", ErrNotFound, name, err)
	}
	if err != nil {
		return nil, fmt.Errorf("catalog: verify: read %s: %w", name, err)
	}
	m, err := DecodeManifest(data)
	if err != nil {
		return nil, fmt.Errorf("catalog: verify %s: %w", name, err)
	}
	root := store
	if m.Kind == KindSavepoint && dir != "" {
		root = tiered.WithPrefix(store, dir)
	}
	rep := &VerifyReport{Manifest: m}
	// Packed files are read from their pack objects' ranges.
	root = backend.PackedStore(root, m.Tasks)
	type job struct {
		f    backend.FileRef
		task backend.TaskID
		// segment: f.Path names a changelog segment in logStore.
		segment bool
		// channel: a segment of channel state, the range [Offset,
		// Offset+Length) of f.Path.
		channel *backend.ChannelSegment
	}
	var jobs []job
	seen := map[string]bool{}
	for _, h := range m.Tasks {
		if h.Log != nil {
			for _, s := range h.Log.Segments {
				if !seen[s] {
					seen[s] = true
					jobs = append(jobs, job{f: backend.FileRef{Path: s}, task: h.Task, segment: true})
				}
			}
		}
		for _, cs := range h.Channels {
			for i := range cs.Segments {
				jobs = append(jobs, job{f: backend.FileRef{Path: cs.Segments[i].Path}, task: h.Task, channel: &cs.Segments[i]})
			}
		}
		if m.Kind == KindCheckpoint && !managed(h) {
			rep.Skipped += len(h.Files)
			continue
		}
		for _, f := range h.Files {
			if !seen[f.Path] {
				seen[f.Path] = true
				jobs = append(jobs, job{f: f, task: h.Task})
			}
		}
	}
	if parallelism <= 0 {
		parallelism = DefaultDeleteParallelism
	}
	var mu sync.Mutex
	sem := make(chan struct{}, parallelism)
	var wg sync.WaitGroup
	for _, j := range jobs {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(j job) {
			defer func() { <-sem; wg.Done() }()
			var prob *FileProblem
			size := j.f.Size
			switch {
			case j.segment:
				size, prob = verifySegment(ctx, logStore, j.f.Path)
			case j.channel != nil:
				size, prob = j.channel.Length, verifyChannelSegment(ctx, root, *j.channel)
			default:
				prob = verifyFile(ctx, root, j.f)
				if prob != nil && j.f.Pack != nil {
					prob.Pack = fmt.Sprintf("bytes %d-%d of pack %s", j.f.Pack.Offset, j.f.Pack.Offset+j.f.Size, j.f.Pack.Object)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			rep.Files++
			rep.Bytes += size
			if prob != nil {
				prob.Task = j.task
				rep.Problems = append(rep.Problems, *prob)
			}
		}(j)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return rep, err
	}
	sort.Slice(rep.Problems, func(i, j int) bool { return rep.Problems[i].Path < rep.Problems[j].Path })
	return rep, nil
}

// verifyChannelSegment reads one segment of channel state back and checks
// its length and checksum (the segment's own frame is checked when it is
// restored).
func verifyChannelSegment(ctx context.Context, store tiered.Store, sg backend.ChannelSegment) *FileProblem {
	where := fmt.Sprintf("%s[%d,+%d)", sg.Path, sg.Offset, sg.Length)
	rc, err := store.GetRange(ctx, sg.Path, sg.Offset, sg.Length)
	if tiered.IsNotFound(err) {
		return &FileProblem{Path: where, Missing: true}
	}
	if err != nil {
		return &FileProblem{Path: where, Detail: "read channel state: " + err.Error()}
	}
	defer rc.Close()
	// The handle's checksum covers the segment but its last four bytes
	// (the frame's own checksum; chanstate.SegmentChecksum).
	body := sg.Length - 4
	if sg.Length < frame.Overhead {
		body = sg.Length // no frame: the reader refuses it anyway
	}
	h := crc32.New(frame.Table())
	n, err := io.Copy(h, io.LimitReader(rc, body))
	var tail bytes.Buffer
	if err == nil {
		var m int64
		m, err = io.Copy(&tail, io.LimitReader(rc, sg.Length-n))
		n += m
	}
	if err != nil {
		return &FileProblem{Path: where, Detail: "read channel state: " + err.Error()}
	}
	if n != sg.Length {
		return &FileProblem{Path: where, Detail: fmt.Sprintf("channel state segment has %d bytes, the handle says %d", n, sg.Length)}
	}
	if got := h.Sum32(); got != sg.CRC32C {
		return &FileProblem{Path: where, Detail: fmt.Sprintf("channel state crc32c %08x, the handle says %08x (corrupt)", got, sg.CRC32C)}
	}
	// The frame's stored checksum must be the same one, or a restore
	// refuses the segment that verify would pass.
	if tail.Len() == 4 {
		if stored := binary.LittleEndian.Uint32(tail.Bytes()); stored != sg.CRC32C {
			return &FileProblem{Path: where, Detail: fmt.Sprintf("channel state segment stores crc32c %08x, the handle says %08x (corrupt)", stored, sg.CRC32C)}
		}
	}
	return nil
}

func verifyFile(ctx context.Context, store tiered.Store, f backend.FileRef) *FileProblem {
	if f.SizeOnly {
		return verifyTable(ctx, store, f)
	}
	rc, err := store.Get(ctx, f.Path)
	if tiered.IsNotFound(err) {
		return &FileProblem{Path: f.Path, Missing: true}
	}
	if err != nil {
		return &FileProblem{Path: f.Path, Detail: "read: " + err.Error()}
	}
	defer rc.Close()
	h := crc32.New(frame.Table())
	n, err := io.Copy(h, io.LimitReader(rc, f.Size+1))
	if err != nil {
		return &FileProblem{Path: f.Path, Detail: "read: " + err.Error()}
	}
	if n != f.Size {
		return &FileProblem{Path: f.Path, Detail: fmt.Sprintf("size %d, the handle says %d", n, f.Size)}
	}
	if got := h.Sum32(); got != f.CRC32C {
		return &FileProblem{Path: f.Path, Detail: fmt.Sprintf("crc32c %08x, the handle says %08x (corrupt)", got, f.CRC32C)}
	}
	return nil
}

// verifyTable checks a size-only file: an lsm SST born in the store
// (remote mode), whose handle has no CRC because stated never read its
// bytes. Pebble's block checksums guard them instead: the SST is read
// block by block with ranged reads and every block's checksum checked.
func verifyTable(ctx context.Context, store tiered.Store, f backend.FileRef) *FileProblem {
	err := tablecheck.Validate(ctx, store, f.Path, f.Size)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, backend.ErrNotFound):
		return &FileProblem{Path: f.Path, Missing: true}
	case errors.Is(err, backend.ErrCorrupt):
		return &FileProblem{Path: f.Path, Detail: "pebble table: " + err.Error() + " (corrupt)"}
	default:
		return &FileProblem{Path: f.Path, Detail: "read: " + err.Error()}
	}
}

// Verify re-reads every file of retained checkpoint id of job (see Verify).
func (c *Catalog) Verify(ctx context.Context, job string, id uint64) (*VerifyReport, error) {
	c.mu.Lock()
	_, ok := c.mu.entries[ref{job, id}]
	c.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: checkpoint %s is not retained", ErrNotFound, CheckpointDir(job, id))
	}
	return VerifyWithLog(ctx, c.store, c.logStore, CheckpointDir(job, id), c.opts.DeleteParallelism)
}

// VerifySavepoint re-reads every file of savepoint id (see Verify).
func (c *Catalog) VerifySavepoint(ctx context.Context, id string) (*VerifyReport, error) {
	if err := ValidateSavepointID(id); err != nil {
		return nil, err
	}
	return Verify(ctx, c.store, SavepointDir(id), c.opts.DeleteParallelism)
}

// errNotManifest is returned by ResolveVerifyPath for a directory without a
// manifest.
var errNotManifest = errors.New("no manifest")

// ResolveVerifyPath splits the slash-separated path of a checkpoint or
// savepoint directory into the store root to open and the directory inside
// it to pass to Verify. read reads "<path>/_metadata". A checkpoint
// "<root>/<job>/chk-<N>" gives (root, "<job>/chk-<N>"), because its handles
// are relative to the checkpoint root; a savepoint gives (path, "").
func ResolveVerifyPath(path string, read func(manifestPath string) ([]byte, error)) (root, dir string, err error) {
	path = strings.TrimSuffix(path, "/")
	data, err := read(path + "/" + ManifestName)
	if err != nil {
		return "", "", fmt.Errorf("catalog: %s: %w: %v", path, errNotManifest, err)
	}
	m, err := DecodeManifest(data)
	if err != nil {
		return "", "", fmt.Errorf("catalog: %s/%s: %w", path, ManifestName, err)
	}
	if m.Kind == KindSavepoint {
		return path, "", nil
	}
	want := CheckpointDir(m.Job, m.CheckpointID)
	if path != want && !strings.HasSuffix(path, "/"+want) {
		return "", "", fmt.Errorf("%w: %s holds the manifest of %s; a checkpoint must stay at <root>/%s to be verified (its files are named relative to the root)",
			ErrInvalidArgument, path, want, want)
	}
	root = strings.TrimSuffix(strings.TrimSuffix(path, want), "/")
	if root == "" {
		root = "."
	}
	return root, want, nil
}
