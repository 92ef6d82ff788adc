package lsm

import (
	"io"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// TestMetaMemFS: the db directory's metadata files are created in
// memory, tables on disk; a metadata file someone else put on disk is
// read, renamed and removed there; renames and links across the two
// sides copy; listings of the directory show both; RemoveAll clears both.
func TestMetaMemFS(t *testing.T) {
	root := t.TempDir()
	disk := vfs.Default
	dir := disk.PathJoin(root, "inst", "db")
	m := newMetaMemFS(disk, dir, false)
	if err := m.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(fs vfs.FS, name, data string) {
		t.Helper()
		f, err := fs.Create(name, vfs.WriteCategoryUnspecified)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Write([]byte(data)); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	read := func(fs vfs.FS, name string) string {
		t.Helper()
		f, err := fs.Open(name)
		if err != nil {
			t.Fatalf("open %s: %v", name, err)
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	onDisk := func(name string) bool {
		_, err := disk.Stat(disk.PathJoin(dir, name))
		return err == nil
	}
	p := func(name string) string { return disk.PathJoin(dir, name) }

	write(m, p("MANIFEST-000001"), "manifest")
	write(m, p("000005.sst"), "table")
	if onDisk("MANIFEST-000001") || !onDisk("000005.sst") {
		t.Fatalf("manifest on disk %v (want false), table on disk %v (want true)", onDisk("MANIFEST-000001"), onDisk("000005.sst"))
	}
	if got := read(m, p("MANIFEST-000001")); got != "manifest" {
		t.Fatalf("manifest reads %q", got)
	}
	// Outside the db directory everything is on disk.
	write(m, disk.PathJoin(root, "inst", "OPTIONS-000002"), "elsewhere")
	if _, err := disk.Stat(disk.PathJoin(root, "inst", "OPTIONS-000002")); err != nil {
		t.Fatalf("a metadata name outside the db directory is not on disk: %v", err)
	}

	// A restore's download cache puts a MANIFEST on disk with its own FS.
	write(disk, p("MANIFEST-000009"), "restored")
	if got := read(m, p("MANIFEST-000009")); got != "restored" {
		t.Fatalf("restored manifest reads %q", got)
	}
	ls, err := m.List(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ls)
	if want := []string{"000005.sst", "MANIFEST-000001", "MANIFEST-000009"}; !slices.Equal(ls, want) {
		t.Fatalf("listing %v, want %v", ls, want)
	}

	// Renames: memory to memory, disk to memory (copied), memory to a
	// table name (copied to disk).
	if err := m.Rename(p("MANIFEST-000001"), p("MANIFEST-000002")); err != nil {
		t.Fatal(err)
	}
	if err := m.Rename(p("MANIFEST-000009"), p("OPTIONS-000010")); err != nil {
		t.Fatal(err)
	}
	if onDisk("MANIFEST-000009") || onDisk("OPTIONS-000010") || read(m, p("OPTIONS-000010")) != "restored" {
		t.Fatal("a rename from disk to a metadata name did not move the file into memory")
	}
	write(m, p("temporary.000011.dbtmp"), "staged table")
	if err := m.Rename(p("temporary.000011.dbtmp"), p("000011.sst")); err != nil {
		t.Fatal(err)
	}
	if !onDisk("000011.sst") || read(m, p("000011.sst")) != "staged table" {
		t.Fatal("a rename to a table name did not put the table on disk")
	}
	if _, err := m.Stat(p("temporary.000011.dbtmp")); err == nil {
		t.Fatal("the renamed file is still there")
	}
	// Links across sides copy.
	if err := m.Link(p("000005.sst"), p("MANIFEST-000012")); err != nil {
		t.Fatal(err)
	}
	if onDisk("MANIFEST-000012") || read(m, p("MANIFEST-000012")) != "table" {
		t.Fatal("a link from disk to a metadata name is not in memory")
	}
	// A metadata file created over one on disk replaces it.
	write(disk, p("marker.x"), "old")
	write(m, p("marker.x"), "new")
	if onDisk("marker.x") || read(m, p("marker.x")) != "new" {
		t.Fatal("a created metadata file did not replace the one on disk")
	}
	// A rename from disk onto a metadata name that the disk also has
	// (a graft's staged MANIFEST over the restored one) leaves no stale
	// copy to reappear once the file is removed.
	write(disk, p("MANIFEST-000020"), "restored")
	write(disk, p("MANIFEST-000020.graft"), "grafted")
	if err := m.Rename(p("MANIFEST-000020.graft"), p("MANIFEST-000020")); err != nil {
		t.Fatal(err)
	}
	if read(m, p("MANIFEST-000020")) != "grafted" {
		t.Fatal("the renamed manifest does not read as the graft")
	}
	if err := m.Remove(p("MANIFEST-000020")); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Stat(p("MANIFEST-000020")); err == nil {
		t.Fatal("a removed manifest reappeared from disk")
	}
	if err := m.Remove(p("MANIFEST-000002")); err != nil {
		t.Fatal(err)
	}
	if err := m.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Stat(p("OPTIONS-000010")); err == nil {
		t.Fatal("RemoveAll left a file in memory")
	}
	if _, err := disk.Stat(dir); err == nil {
		t.Fatal("RemoveAll left the directory on disk")
	}
}

// TestMetaMemFSLazyDirs: in lazy mode the instance's directories exist in
// memory until a file is written to disk under them; Stat, OpenDir, List
// and GetDiskUsage answer for them meanwhile.
func TestMetaMemFSLazyDirs(t *testing.T) {
	root := t.TempDir()
	disk := vfs.Default
	inst := disk.PathJoin(root, "instances", "job", "inst")
	dir := disk.PathJoin(inst, "db")
	m := newMetaMemFS(disk, dir, true)
	for _, d := range []string{inst, dir, disk.PathJoin(inst, "chk")} {
		if err := m.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := disk.Stat(disk.PathJoin(root, "instances")); !oserrorNotExist(err) {
		t.Fatalf("a lazy MkdirAll made a directory on disk: %v", err)
	}
	if fi, err := m.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("Stat of the lazy db directory: %v", err)
	}
	d, err := m.OpenDir(dir)
	if err != nil {
		t.Fatalf("OpenDir of the lazy db directory: %v", err)
	}
	_ = d.Close()
	if _, err := m.GetDiskUsage(dir); err != nil {
		t.Fatalf("disk usage of the lazy db directory: %v", err)
	}
	f, err := m.Create(disk.PathJoin(dir, "OPTIONS-000003"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if ls, err := m.List(dir); err != nil || len(ls) != 1 {
		t.Fatalf("listing of the lazy db directory: %v %v", ls, err)
	}
	if ls, err := m.List(inst); err != nil || len(ls) != 2 {
		t.Fatalf("listing of the lazy instance directory: %v %v, want db and chk", ls, err)
	}
	if _, err := disk.Stat(inst); !oserrorNotExist(err) {
		t.Fatalf("a metadata file made the directory on disk: %v", err)
	}
	// The first table puts the directories on disk.
	f, err = m.Create(disk.PathJoin(dir, "000004.sst"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	if _, err := disk.Stat(disk.PathJoin(dir, "000004.sst")); err != nil {
		t.Fatalf("the table is not on disk: %v", err)
	}
	ls, err := m.List(dir)
	slices.Sort(ls)
	if err != nil || !slices.Equal(ls, []string{"000004.sst", "OPTIONS-000003"}) {
		t.Fatalf("listing after the first table: %v %v", ls, err)
	}
	if ls, err := m.List(inst); err != nil || len(ls) != 2 {
		t.Fatalf("listing of the instance directory after the first table: %v %v, want db and chk", ls, err)
	}
	if err := m.RemoveAll(inst); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Stat(dir); !oserrorNotExist(err) {
		t.Fatalf("RemoveAll left the db directory: %v", err)
	}
}
