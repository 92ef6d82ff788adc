package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/hashicorp/raft"
	wal "github.com/hashicorp/raft-wal"
	"github.com/hashicorp/raft-wal/metadb"

	"github.com/statedhq/stated/cluster/raftlog"
)

// logStore is a raft log and stable store that can be closed.
type logStore interface {
	raft.LogStore
	raft.StableStore
	io.Closer
}

// walStore is a raft-wal log with the metadata store it was given (which
// its Close leaves open).
type walStore struct {
	*wal.WAL
	meta *metadb.BoltMetaDB
}

func (w walStore) Close() error {
	err := w.WAL.Close()
	if cerr := w.meta.Close(); err == nil {
		err = cerr
	}
	return err
}

func openRaftWAL(t *testing.T, dir string) logStore {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	meta := &metadb.BoltMetaDB{}
	w, err := wal.Open(dir, wal.WithMetaStore(meta))
	if err != nil {
		t.Fatal(err)
	}
	return walStore{WAL: w, meta: meta}
}

func openPebble(t *testing.T, dir string) logStore {
	t.Helper()
	s, err := raftlog.Open(dir, raftlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// truncatedTail drives a log as raft does when a follower holds entries
// a new leader does not ("clearing log suffix"): entries 1-10 of term 1
// (a configuration first), entries 8-10 dropped, the leader's 8-12 of
// term 2 stored, then the process restarts.
func truncatedTail(t *testing.T, open func(*testing.T) logStore) {
	t.Helper()
	s := open(t)
	conf := raft.EncodeConfiguration(raft.Configuration{Servers: []raft.Server{{ID: "n0", Address: "n0"}}})
	logs := []*raft.Log{{Index: 1, Term: 1, Type: raft.LogConfiguration, Data: conf}}
	for i := uint64(2); i <= 10; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: encodeCommand(command{Op: opAcquire, Task: fmt.Sprint(i), Holder: "n0"})})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64(keyCurrentTerm, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(8, 10); err != nil {
		t.Fatal(err)
	}
	logs = nil
	for i := uint64(8); i <= 12; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 2, Type: raft.LogCommand, Data: encodeCommand(command{Op: opAcquire, Task: fmt.Sprint(i), Holder: "n1"})})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// startRaft starts raft on s as a node does, and returns what raft
// panicked with, if it did.
func startRaft(t *testing.T, s logStore) (panicked any) {
	t.Helper()
	defer func() { panicked = recover() }()
	conf := raft.DefaultConfig()
	conf.LocalID = "n0"
	conf.LogOutput = io.Discard
	_, trans := raft.NewInmemTransport("n0")
	r, err := raft.NewRaft(conf, newFSM(nil), s, s, raft.NewInmemSnapshotStore(), trans)
	if err != nil {
		t.Fatalf("raft start: %v", err)
	}
	if err := r.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	return nil
}

// TestTruncatedTailRestarts is issue 38's node that never starts again.
// With raft-wal v0.4.0 (the log before this store), a tail truncation
// seals a segment without its index: at the next start raft cannot read
// the entries before the truncation and panics, and so at every start
// after. With the Pebble store the same sequence restarts, twice, with
// every entry intact.
func TestTruncatedTailRestarts(t *testing.T) {
	t.Run("raft-wal-v0.4.0-panics", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "wal")
		truncatedTail(t, func(t *testing.T) logStore { return openRaftWAL(t, dir) })
		for start := range 2 {
			s := openRaftWAL(t, dir)
			p := startRaft(t, s)
			_ = s.Close()
			if p == nil || !strings.Contains(fmt.Sprint(p), "sealed segment has no index block") {
				t.Fatalf("start %d on raft-wal after a tail truncation: panic %v; the defect this store replaces is no longer reproduced", start, p)
			}
		}
	})
	t.Run("pebble", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "log")
		truncatedTail(t, func(t *testing.T) logStore { return openPebble(t, dir) })
		for start := range 2 {
			s := openPebble(t, dir)
			if p := startRaft(t, s); p != nil {
				t.Fatalf("start %d: raft panicked: %v", start, p)
			}
			for i := uint64(1); i <= 12; i++ {
				var l raft.Log
				if err := s.GetLog(i, &l); err != nil {
					t.Fatalf("start %d: entry %d: %v", start, i, err)
				}
				if want := uint64(1 + i/8); l.Term != want {
					t.Fatalf("start %d: entry %d of term %d, want %d", start, i, l.Term, want)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// logBuffer collects a logger's lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func bufLogger() (*slog.Logger, *logBuffer) {
	b := &logBuffer{}
	return slog.New(slog.NewTextHandler(b, nil)), b
}

// oldRaftDir makes the raft dir of a stated before this store: a
// single-voter cluster n0 on raft-wal that took tokens for tasks t1..tn,
// plus, when damaged, the tail truncation that broke raft-wal.
func oldRaftDir(t *testing.T, tasks int, snapshot bool) string {
	t.Helper()
	dir := t.TempDir()
	s := openRaftWAL(t, filepath.Join(dir, walDirName))
	snaps, err := raft.NewFileSnapshotStore(filepath.Join(dir, "snapshots"), 2, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	conf := raft.DefaultConfig()
	conf.LocalID = "n0"
	conf.LogOutput = io.Discard
	conf.HeartbeatTimeout, conf.ElectionTimeout, conf.LeaderLeaseTimeout = 100*time.Millisecond, 100*time.Millisecond, 50*time.Millisecond
	_, trans := raft.NewInmemTransport("n0")
	if err := raft.BootstrapCluster(conf, s, s, snaps, trans, raft.Configuration{Servers: []raft.Server{{ID: "n0", Address: "n0"}}}); err != nil {
		t.Fatal(err)
	}
	r, err := raft.NewRaft(conf, newFSM(nil), s, s, snaps, trans)
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); r.State() != raft.Leader; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no leader")
		}
	}
	for i := 1; i <= tasks; i++ {
		if err := r.Apply(encodeCommand(command{Op: opAcquire, Task: fmt.Sprintf("t%d", i), Holder: "n0"}), 5*time.Second).Error(); err != nil {
			t.Fatal(err)
		}
		if snapshot && i == tasks/2 {
			if err := r.Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := r.Shutdown().Error(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// damage truncates the old log's tail as "clearing log suffix" did and
// stores new entries after it: the raft-wal v0.4.0 defect.
func damage(t *testing.T, dir string) {
	t.Helper()
	s := openRaftWAL(t, filepath.Join(dir, walDirName))
	last, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteRange(last-1, last); err != nil {
		t.Fatal(err)
	}
	if err := s.StoreLogs([]*raft.Log{{Index: last - 1, Term: 9, Type: raft.LogNoop}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

func openOn(t *testing.T, dir string, log *slog.Logger) (*Member, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{ID: "n0", Listener: ln, Dir: dir, Token: "cluster-secret", Logger: log}
	fast(&o)
	n, err := Open(o)
	if err != nil {
		_ = ln.Close()
	}
	return n, err
}

func waitLeaderNode(t *testing.T, n *Member) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !n.IsLeader(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the node did not lead its one-voter cluster within 10s")
		}
	}
}

// A raft dir of an older stated is migrated at the first start: the node
// has every token the old log held, the old log is kept as wal.migrated,
// the log says so, and the next start opens the new store alone.
func TestNodeMigratesRaftWAL(t *testing.T) {
	dir := oldRaftDir(t, 40, true)
	log, buf := bufLogger()
	n, err := openOn(t, dir, log)
	if err != nil {
		t.Fatal(err)
	}
	waitLeaderNode(t, n)
	if err := n.Barrier(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 40; i++ {
		if _, holder, ok := n.Holder(fmt.Sprintf("t%d", i)); !ok || holder != "n0" {
			t.Fatalf("task t%d after the migration: holder %q, %v", i, holder, ok)
		}
	}
	if _, err := n.Acquire(ctxT(t), "t41", "n0"); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"migrated the raft log from raft-wal", walMigratedName} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, buf.String())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, walDirName)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the old log is still at %s: %v", walDirName, err)
	}
	if _, err := os.Stat(filepath.Join(dir, walMigratedName)); err != nil {
		t.Errorf("the old log is not kept aside: %v", err)
	}

	log, buf = bufLogger()
	if n, err = openOn(t, dir, log); err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	waitLeaderNode(t, n)
	if err := n.Barrier(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, holder, ok := n.Holder("t41"); !ok || holder != "n0" {
		t.Fatalf("a token taken after the migration, at the next start: %q %v", holder, ok)
	}
	if strings.Contains(buf.String(), "migrat") {
		t.Errorf("the second start migrated again:\n%s", buf.String())
	}
}

// A migration cut short (the process killed) starts over at the next
// start; one that completed but did not rename the old log aside only
// renames it.
func TestMigrationResumes(t *testing.T) {
	dir := oldRaftDir(t, 5, false)
	// A half-written store from a killed migration.
	if err := os.MkdirAll(filepath.Join(dir, migratingName), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, migratingName, "junk"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := openLogStore(dir, 0, "n0", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	last, err := s.LastIndex()
	if err != nil || last < 6 { // configuration, no-op, 5 commands
		t.Fatalf("last index %d, %v after the migration", last, err)
	}
	if term, err := s.GetUint64(keyCurrentTerm); err != nil || term == 0 {
		t.Fatalf("the term was not migrated: %d, %v", term, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Put the old log back, as a crash between the two renames leaves it.
	if err := os.Rename(filepath.Join(dir, walMigratedName), filepath.Join(dir, walDirName)); err != nil {
		t.Fatal(err)
	}
	log, buf := bufLogger()
	if s, err = openLogStore(dir, 0, "n0", log); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if strings.Contains(buf.String(), "migrating") || !strings.Contains(buf.String(), "kept aside") {
		t.Fatalf("want the old log renamed aside without a second migration:\n%s", buf.String())
	}
	if l2, _ := s.LastIndex(); l2 != last {
		t.Fatalf("last index %d, was %d", l2, last)
	}
}

// A raft-wal log broken by the v0.4.0 defect: the migration neither
// panics nor starts a node on a log with holes; it names the entries and
// says how to recover the node from its peers.
func TestMigrationOfDamagedRaftWAL(t *testing.T) {
	dir := oldRaftDir(t, 10, false)
	damage(t, dir)
	// Raft alone on this log panics (the defect):
	s := openRaftWAL(t, filepath.Join(dir, walDirName))
	if p := startRaft(t, s); p == nil {
		t.Fatal("raft started on the damaged raft-wal log: the defect is no longer reproduced")
	}
	_ = s.Close()
	n, err := openOn(t, dir, slog.New(slog.DiscardHandler))
	if err == nil {
		n.Close()
		t.Fatal("a node started on a raft-wal log whose entries cannot be read")
	}
	for _, want := range []string{"cannot be read", "sealed segment has no index block", "cluster leave --leaving-node-id n0", "cluster join"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if !errors.Is(err, ErrWALDamaged) {
		t.Errorf("error %v does not wrap ErrWALDamaged", err)
	}
	t.Logf("the node's error: %v", err)
	for _, name := range []string{logDirName, migratingName, walMigratedName} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a refused migration left %s: %v", name, err)
		}
	}
}

// When the newest snapshot covers every entry raft-wal lost, the node
// needs none of them: the migration drops them, says so, and the node
// starts with every token.
func TestMigrationDropsLostEntriesASnapshotCovers(t *testing.T) {
	dir := oldRaftDir(t, 10, false)
	damage(t, dir)
	s := openRaftWAL(t, filepath.Join(dir, walDirName))
	last, err := s.LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	_ = s.Close()
	log, buf := bufLogger()
	ls, err := openLogStore(dir, last-1, "n0", log)
	if err != nil {
		t.Fatal(err)
	}
	defer ls.Close()
	first, _ := ls.FirstIndex()
	l2, _ := ls.LastIndex()
	if first != last || l2 != last {
		t.Fatalf("migrated log [%d, %d], want the one readable entry %d", first, l2, last)
	}
	if !strings.Contains(buf.String(), "were dropped") {
		t.Fatalf("the log does not say what was dropped:\n%s", buf.String())
	}
}

// A damaged entry in the node's log stops the node's start with an error
// naming the entry and what to do, instead of raft's panic when it reads
// the entry.
func TestNodeRefusesCorruptLog(t *testing.T) {
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := Options{ID: "n0", Listener: ln, Dir: dir, Token: "cluster-secret", Logger: slog.New(slog.DiscardHandler),
		Peers: []Peer{{ID: "n0", Addr: ln.Addr().String()}}}
	fast(&o)
	n, err := Open(o)
	if err != nil {
		t.Fatal(err)
	}
	waitLeaderNode(t, n)
	if _, err := n.Acquire(ctxT(t), "t", "n0"); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	// Flip a byte of entry 2's record behind the store's back (key
	// layout: cluster/raftlog/doc.go).
	db, err := pebble.Open(filepath.Join(dir, logDirName), &pebble.Options{})
	if err != nil {
		t.Fatal(err)
	}
	key := []byte{0x01, 0, 0, 0, 0, 0, 0, 0, 2}
	v, closer, err := db.Get(key)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), v...)
	closer.Close()
	bad[len(bad)-1] ^= 0x40
	if err := db.Set(key, bad, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	n, err = openOn(t, dir, slog.New(slog.DiscardHandler))
	if err == nil {
		n.Close()
		t.Fatal("a node started on a log with a damaged entry")
	}
	if !errors.Is(err, raftlog.ErrCorrupt) || !strings.Contains(err.Error(), "log entry 2 ") || !strings.Contains(err.Error(), "join it again") {
		t.Fatalf("error %v: want a CorruptError naming entry 2 and what to do", err)
	}
}
