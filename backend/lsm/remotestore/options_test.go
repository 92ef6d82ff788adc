package remotestore_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"

	"github.com/statedhq/stated/backend/lsm/remotestore"
	"github.com/statedhq/stated/tiered/memstore"
)

func TestOptionsDefaults(t *testing.T) {
	st, err := remotestore.New(remotestore.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	o := st.Options()
	if o.SpoolDir == "" || o.SpoolMemoryBytes != remotestore.DefaultSpoolMemoryBytes || o.CallTimeout != remotestore.DefaultCallTimeout {
		t.Fatalf("defaults not filled: %+v", o)
	}
}

// TestOptionsValidate: every problem is reported at once, each named.
func TestOptionsValidate(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	_, err := remotestore.New(remotestore.Options{SpoolDir: missing, SpoolMemoryBytes: -1, CallTimeout: -1})
	if !errors.Is(err, remotestore.ErrInvalidOptions) {
		t.Fatalf("New: %v, want ErrInvalidOptions", err)
	}
	for _, want := range []string{"no store", "spool memory size -1", "call timeout -1ns", missing} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestFactory(t *testing.T) {
	f, err := remotestore.NewFactory(map[remote.Locator]remotestore.Options{
		"":     {Store: memstore.New()},
		"job1": {Store: memstore.New()},
	})
	if err != nil {
		t.Fatal(err)
	}
	a, err := f.CreateStorage("job1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := f.CreateStorage("job1")
	if a != b || a != remote.Storage(f.Storage("job1")) {
		t.Error("two calls for one locator gave different storages")
	}
	if d, _ := f.CreateStorage(""); d == a {
		t.Error("two locators share a storage")
	}
	_, err = f.CreateStorage("job2")
	if !errors.Is(err, remotestore.ErrUnknownLocator) || !strings.Contains(err.Error(), `"job2"`) {
		t.Errorf("unknown locator: %v", err)
	}
	_, err = remotestore.NewFactory(map[remote.Locator]remotestore.Options{"good": {Store: memstore.New()}, "bad": {}})
	if !errors.Is(err, remotestore.ErrInvalidOptions) || !strings.Contains(err.Error(), `locator "bad"`) || strings.Contains(err.Error(), `"good"`) {
		t.Errorf("invalid options of one locator: %v", err)
	}
	if _, err := remotestore.NewFactory(nil); !errors.Is(err, remotestore.ErrInvalidOptions) {
		t.Errorf("empty factory: %v", err)
	}
}

func TestClosedStorage(t *testing.T) {
	st, err := remotestore.New(remotestore.Options{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := st.CreateObject("a.sst"); err == nil || !strings.Contains(err.Error(), "a.sst") {
		t.Errorf("CreateObject after Close: %v", err)
	}
	if _, err := st.List("", ""); err == nil {
		t.Error("List after Close succeeded")
	}
}
