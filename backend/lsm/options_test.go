package lsm

import (
	"errors"
	"strings"
	"testing"

	"github.com/statedhq/stated/backend"
)

func TestOptionsValidateReportsEverything(t *testing.T) {
	o := Options{CacheSize: -1, MemTableSize: 1, TargetFileSize: 1, MaxManifestFileSize: 1, UploadConcurrency: 1000}
	o.EnsureDefaults()
	err := o.Validate()
	if !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("error %v does not wrap ErrInvalidArgument", err)
	}
	for _, want := range []string{"local directory", "cache size", "memtable", "target file size", "manifest", "upload concurrency"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	good := Options{Dir: "x"}
	good.EnsureDefaults()
	if err := good.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	if _, err := Open(backend.Options{}, Options{}); !errors.Is(err, backend.ErrInvalidArgument) {
		t.Fatalf("open without options: %v", err)
	}
}

// TestMemTableDefaultByMode: an instance in remote mode gets the larger
// memtable (each flush is an object in the store); one set explicitly
// keeps its size in either mode.
func TestMemTableDefaultByMode(t *testing.T) {
	for _, c := range []struct {
		remote bool
		set    uint64
		want   uint64
	}{{false, 0, DefaultMemTableSize}, {true, 0, DefaultRemoteMemTableSize}, {true, 1 << 20, 1 << 20}, {false, 1 << 20, 1 << 20}} {
		o := Options{Dir: "x", MemTableSize: c.set}
		if c.remote {
			o.Remote = &RemoteOptions{}
		}
		o.EnsureDefaults()
		if o.MemTableSize != c.want {
			t.Errorf("remote %v, set %d: memtable %d, want %d", c.remote, c.set, o.MemTableSize, c.want)
		}
	}
}
