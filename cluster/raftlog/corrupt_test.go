package raftlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
)

// rewrite sets raw keys of the closed store at dir, behind its back.
func rewrite(t *testing.T, fs vfs.FS, dir string, kv map[string][]byte) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{FS: fs, Logger: pebbleLogger{log: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range kv {
		if err := db.Set([]byte(k), v, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptRecordsAreTypedErrors(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("/r", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	var logs []*raft.Log
	for i := uint64(1); i <= 9; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Data: []byte("payload")})
	}
	if err := s.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.Set([]byte("LastVoteCand"), []byte("n1")); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUint64([]byte("CurrentTerm"), 3); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	flipped := encodeEntry(logs[4])
	flipped[len(flipped)-3] ^= 0x01
	moved := encodeEntry(logs[6]) // entry 7's record under key 6
	rewrite(t, fs, "/r", map[string][]byte{
		string(logKey(5)):                         flipped,
		string(logKey(6)):                         moved,
		string(logKey(8)):                         {1, 2, 3},
		string(stableKey([]byte("LastVoteCand"))): append(encodeStable([]byte("n1")), 0),
		string(stableKey([]byte("CurrentTerm"))):  encodeStable([]byte{1, 2}),
	})
	s, err = Open("/r", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for idx, want := range map[uint64]string{5: "checksum mismatch", 6: "record holds index 7", 8: "shorter than"} {
		var l raft.Log
		err := s.GetLog(idx, &l)
		var ce *CorruptError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Index != idx || ce.Dir != "/r" ||
			!strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "log entry") {
			t.Errorf("GetLog(%d) of a damaged record: %v; want a CorruptError naming the entry and %q", idx, err, want)
		}
	}
	var l raft.Log
	if err := s.GetLog(4, &l); err != nil || string(l.Data) != "payload" {
		t.Errorf("an intact entry next to damaged ones: %+v, %v", l, err)
	}
	if _, err := s.Check(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "log entry 5 ") {
		t.Errorf("Check: %v; want the first damaged entry, 5", err)
	}
	if _, err := s.Get([]byte("LastVoteCand")); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), `"LastVoteCand"`) {
		t.Errorf("Get of a damaged value: %v", err)
	}
	if _, err := s.GetUint64([]byte("CurrentTerm")); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "uint64 value of 2 bytes") {
		t.Errorf("GetUint64 of a value of the wrong size: %v", err)
	}
}

func TestFormatVersion(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("/r", Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	var v [4]byte
	binary.BigEndian.PutUint32(v[:], FormatVersion+1)
	rewrite(t, fs, "/r", map[string][]byte{string(versionKey): v[:]})
	if _, err := Open("/r", Options{FS: fs}); !errors.Is(err, ErrFormatVersion) || !strings.Contains(err.Error(), "format version 2") {
		t.Fatalf("open of a newer format: %v", err)
	}
	// Records without a version: not a store this code wrote.
	fs2 := vfs.NewMem()
	rewrite(t, fs2, "/r", map[string][]byte{string(logKey(1)): {1}})
	if _, err := Open("/r", Options{FS: fs2}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("open of records without a format version: %v", err)
	}
}

func TestClosedStore(t *testing.T) {
	s, err := Open("/r", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	var l raft.Log
	for name, err := range map[string]error{
		"GetLog": s.GetLog(1, &l), "StoreLog": s.StoreLog(&raft.Log{Index: 1}), "DeleteRange": s.DeleteRange(1, 2),
		"Set": s.Set([]byte("k"), nil),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v", name, err)
		}
	}
	if _, err := s.LastIndex(); !errors.Is(err, ErrClosed) {
		t.Errorf("LastIndex after Close: %v", err)
	}
}

// FuzzDecodeEntry: no input makes the decoder panic, and what it accepts
// encodes back to the same bytes.
func FuzzDecodeEntry(f *testing.F) {
	for _, l := range []*raft.Log{
		{Index: 1, Term: 1},
		{Index: 7, Term: 3, Type: raft.LogConfiguration, Data: []byte("conf"), Extensions: []byte("x"), AppendedAt: time.Unix(5, 6)},
	} {
		f.Add(l.Index, encodeEntry(l))
	}
	f.Fuzz(func(t *testing.T, idx uint64, b []byte) {
		var l raft.Log
		if err := decodeEntry(idx, b, &l); err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) || ce.Index != idx {
				t.Fatalf("error %v is not a CorruptError naming %d", err, idx)
			}
			return
		}
		if got := encodeEntry(&l); !bytes.Equal(got, b) {
			t.Fatalf("decoded %+v encodes to %x, read from %x", l, got, b)
		}
	})
}
