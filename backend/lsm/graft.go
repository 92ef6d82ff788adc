package lsm

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/statedhq/stated/backend"
)

// Grafting moves the SSTs of another store into the base store without
// rewriting a byte: the files are hard-linked under new file numbers and
// one version edit, appended to the base's MANIFEST while the base is
// closed, adds them at the levels, with the bounds and sequence numbers,
// they had in their own store.
//
// Why this is sound: the stores' tables cover disjoint key spans (the
// base was excised where the other stores' key groups go, each other store
// everywhere else; finishBase checks the bounds before grafting), and
// every Pebble invariant that relates tables to each other (non-overlap
// within a level, newer data above older data for the same key, L0 order
// of overlapping files, range deletions over older keys) is about tables
// that share keys. Sequence numbers of the stores are unrelated but never
// meet on one key. The base's last sequence number becomes the largest
// sequence number of any table of any of the stores: every key lives in a
// table (the WAL is off and the memtable empty), so new writes are newer
// than every key. Pebble checks the result when the base is opened again:
// every file must be present with the size the MANIFEST says, and the
// levels the edit touches must be ordered.
//
// The version-edit encoding used is the LevelDB/RocksDB one that Pebble
// decodes (internal/manifest/version_edit.go of Pebble v2.1.7): tag
// numbers, uvarints, length-prefixed internal keys (user key then the
// 8-byte little-endian trailer). Only the fields a table needs are written;
// tables with range keys or blob references are never grafted (the store
// is rewritten instead; kvstate writes neither). A Pebble upgrade must
// re-check this encoding: checkGraft (graftcheck.go) grafts a small store
// and compares what Pebble reads and rewrites with what was written. It
// runs once per process before the first graft (a mismatch makes restores
// copy instead: Options.NoGraft), and TestGraftMatchesPebble runs it and
// compares the edit with Pebble's own tooling.
const (
	veTagNextFileNumber     = 3
	veTagLastSequence       = 4
	veTagNewFile2           = 100
	veTagNewFile4           = 103
	veTagCreatedBackingFile = 105
	veCustomTagTerminate    = 1
	veCustomTagVirtual      = 66
)

// graftTable is one table of a store to graft.
type graftTable struct {
	level int
	info  pebble.SSTableInfo // in its own store
	// newNum and newBacking are the table's number and its backing file's
	// number in the base (the same for a physical table).
	newNum, newBacking uint64
}

// graftSource is an extra lsm handle whose store, clipped to the key
// groups the handle gives, is ready to graft.
type graftSource struct {
	h      *backend.Handle
	dir    string
	tables []graftTable
	// fetched are the handle's files that were downloaded, by local name.
	fetched map[string]backend.FileRef
}

// infos returns the source's tables.
func (g *graftSource) infos() []pebble.SSTableInfo {
	out := make([]pebble.SSTableInfo, len(g.tables))
	for i, t := range g.tables {
		out[i] = t.info
	}
	return out
}

// overlapping returns two tables of different stores (groups) whose key
// bounds overlap, if any. Tables of one store may overlap each other (one
// key at several levels); tables of different stores must not.
func overlapping(groups [][]pebble.SSTableInfo) (a, b pebble.SSTableInfo, ok bool) {
	for i := range groups {
		for j := i + 1; j < len(groups); j++ {
			for _, x := range groups[i] {
				for _, y := range groups[j] {
					if boundsOverlap(x, y) {
						return x, y, true
					}
				}
			}
		}
	}
	return a, b, false
}

// boundsOverlap reports whether two tables' key bounds share a key. A
// largest bound that is an exclusive sentinel (the end of a range
// deletion) does not include its own key.
func boundsOverlap(x, y pebble.SSTableInfo) bool {
	below := func(largest, smallest pebble.InternalKey) bool {
		c := bytes.Compare(largest.UserKey, smallest.UserKey)
		return c < 0 || (c == 0 && largest.IsExclusiveSentinel())
	}
	return !below(x.Largest, y.Smallest) && !below(y.Largest, x.Smallest)
}

var fileNumRE = regexp.MustCompile(`^(?:MANIFEST-|OPTIONS-)?([0-9]+)(?:\.sst|\.log|\.blob)?$`)

// maxFileNum returns the largest file number a name in dir carries.
func maxFileNum(fs vfs.FS, dir string) (uint64, error) {
	names, err := fs.List(dir)
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, name := range names {
		if m := fileNumRE.FindStringSubmatch(name); m != nil {
			if v, err := strconv.ParseUint(m[1], 10, 64); err == nil && v > n {
				n = v
			}
		}
	}
	return n, nil
}

// currentManifest returns the name of the MANIFEST that dir's manifest
// marker points at (the marker with the highest iteration).
func currentManifest(fs vfs.FS, dir string) (string, error) {
	names, err := fs.List(dir)
	if err != nil {
		return "", err
	}
	best, name := -1, ""
	for _, n := range names {
		// marker.manifest.<iteration>.<value>
		rest, ok := strings.CutPrefix(n, "marker.manifest.")
		if !ok {
			continue
		}
		it, value, ok := strings.Cut(rest, ".")
		if !ok {
			continue
		}
		i, err := strconv.Atoi(it)
		if err != nil {
			continue
		}
		if i > best {
			best, name = i, value
		}
	}
	if name == "" || !strings.HasPrefix(name, "MANIFEST-") {
		return "", fmt.Errorf("no manifest marker in %s", dir)
	}
	return name, nil
}

func appendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

func appendInternalKey(b []byte, k pebble.InternalKey) []byte {
	b = appendUvarint(b, uint64(len(k.UserKey)+8))
	b = append(b, k.UserKey...)
	return binary.LittleEndian.AppendUint64(b, uint64(k.Trailer))
}

// encodeGraftEdit encodes the version edit that adds tables: the backing
// files of the virtual ones (new number -> size), then every table at its
// level. nextFileNum and lastSeq are the base's new counters.
func encodeGraftEdit(tables []graftTable, backings map[uint64]uint64, nextFileNum, lastSeq uint64) []byte {
	var b []byte
	b = appendUvarint(b, veTagNextFileNumber)
	b = appendUvarint(b, nextFileNum)
	nums := make([]uint64, 0, len(backings))
	for n := range backings {
		nums = append(nums, n)
	}
	sort.Slice(nums, func(i, j int) bool { return nums[i] < nums[j] })
	for _, n := range nums {
		b = appendBacking(b, n, backings[n])
	}
	b = appendUvarint(b, veTagLastSequence)
	b = appendUvarint(b, lastSeq)
	for _, t := range tables {
		b = appendGraftTable(b, t)
	}
	return b
}

// appendBacking appends the field that declares a virtual table's backing
// file.
func appendBacking(b []byte, num, size uint64) []byte {
	b = appendUvarint(b, veTagCreatedBackingFile)
	b = appendUvarint(b, num)
	return appendUvarint(b, size)
}

// appendGraftTable appends the field that adds one table. Pebble encodes
// a table without creation time, compaction mark, range keys or blob
// references the same way: checkGraft compares the two.
func appendGraftTable(b []byte, t graftTable) []byte {
	tag := uint64(veTagNewFile2)
	if t.info.Virtual {
		tag = veTagNewFile4
	}
	b = appendUvarint(b, tag)
	b = appendUvarint(b, uint64(t.level))
	b = appendUvarint(b, t.newNum)
	b = appendUvarint(b, t.info.Size)
	b = appendInternalKey(b, t.info.Smallest)
	b = appendInternalKey(b, t.info.Largest)
	b = appendUvarint(b, uint64(t.info.SmallestSeqNum))
	b = appendUvarint(b, uint64(t.info.LargestSeqNum))
	if t.info.Virtual {
		b = appendUvarint(b, veCustomTagVirtual)
		b = appendUvarint(b, t.newBacking)
		b = appendUvarint(b, veCustomTagTerminate)
	}
	return b
}

// graft hard-links the backing files of srcs into the base's directory
// under file numbers from next on, and appends the version edit that adds
// their tables to the base's MANIFEST. The base must be closed. lastSeq is
// the largest sequence number of the base's tables. It returns the shared
// files of the handles that now live in the base, by their new local
// names: the same objects, which later checkpoints may reference.
func (b *Backend) graft(srcs []*graftSource, next, lastSeq uint64) (fileSet, error) {
	_, grafted, err := graftInto(b.lo.FS, b.dbDir, srcs, next, lastSeq)
	return grafted, err
}

// graftInto is graft into the closed store in dir of fs. It also returns
// the tables it added, with their numbers in the base.
func graftInto(fs vfs.FS, dbDir string, srcs []*graftSource, next, lastSeq uint64) ([]graftTable, fileSet, error) {
	var tables []graftTable
	backings := map[uint64]uint64{} // virtual tables' backing files
	grafted := fileSet{}
	for _, s := range srcs {
		renamed := map[uint64]uint64{} // backing file: number in the source -> in the base
		for _, t := range s.tables {
			src := uint64(t.info.BackingSSTNum)
			nb, ok := renamed[src]
			newName := fmt.Sprintf("%06d.sst", nb)
			if !ok {
				nb = next
				next++
				renamed[src] = nb
				oldName := fmt.Sprintf("%06d.sst", src)
				newName = fmt.Sprintf("%06d.sst", nb)
				if err := vfs.LinkOrCopy(fs, fs.PathJoin(s.dir, oldName), fs.PathJoin(dbDir, newName)); err != nil {
					return nil, nil, fmt.Errorf("graft %s of checkpoint %d of %s: %w", oldName, s.h.CheckpointID, s.h.Task, err)
				}
				if ref, ok := s.fetched[oldName]; ok && ref.Shared {
					ref.LocalName = newName
					grafted[newName] = ref
				}
			}
			t.newBacking = nb
			t.newNum = nb
			if t.info.Virtual {
				t.newNum = next
				next++
				info, err := fs.Stat(fs.PathJoin(dbDir, newName))
				if err != nil {
					return nil, nil, fmt.Errorf("graft: %w", err)
				}
				backings[nb] = uint64(info.Size())
			}
			lastSeq = max(lastSeq, uint64(t.info.LargestSeqNum))
			tables = append(tables, t)
		}
	}
	if len(tables) == 0 {
		return nil, grafted, nil
	}
	manifest, err := currentManifest(fs, dbDir)
	if err != nil {
		return nil, nil, fmt.Errorf("graft: %w", err)
	}
	rec := encodeGraftEdit(tables, backings, next, lastSeq)
	if err := appendManifestRecord(fs, fs.PathJoin(dbDir, manifest), rec); err != nil {
		return nil, nil, fmt.Errorf("graft: write %s: %w", manifest, err)
	}
	return tables, grafted, nil
}

// appendManifestRecord rewrites the MANIFEST at path with one more record
// (record by record: a record log cannot be appended to at a raw byte
// offset) and replaces it atomically.
func appendManifestRecord(fs vfs.FS, path string, rec []byte) error {
	src, err := fs.Open(path)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := path + ".graft"
	dst, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			_ = dst.Close()
			_ = fs.Remove(tmp)
		}
	}()
	r := record.NewReader(src, 0)
	w := record.NewWriter(dst)
	for {
		rr, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
		rw, err := w.Next()
		if err != nil {
			return err
		}
		if _, err := io.Copy(rw, rr); err != nil {
			return fmt.Errorf("read %s: %w", path, err)
		}
	}
	rw, err := w.Next()
	if err != nil {
		return err
	}
	if _, err := rw.Write(rec); err != nil {
		return err
	}
	if err := errors.Join(w.Close(), dst.Sync(), dst.Close()); err != nil {
		return err
	}
	ok = true
	if err := fs.Rename(tmp, path); err != nil {
		return err
	}
	dir, err := fs.OpenDir(fs.PathDir(path))
	if err != nil {
		return err
	}
	return errors.Join(dir.Sync(), dir.Close())
}
