package remotestore_test

import (
	"bytes"
	"context"
	"maps"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/statedhq/stated/backend/lsm/remotestore"
)

// names are shaped like Pebble's objects and markers; none is a directory
// of another, so a directory store could hold any set of them.
var propNames = []string{"1a3f-2-000001.sst", "1a3f-2-000001.sst.ref.2.000001", "1a3f-2-000001.sst.ref.5.000009", "2b00-2-000002.sst", "d/x.sst", "d/y.sst"}

var propPrefixes = []string{"", "1a3f-2-000001.sst.ref.", "1a3f", "d", "d/", "2", "zz"}

// TestProperty runs random creates, ranged reads, sizes, lists and deletes
// against a Storage and a map, over memstore and localfs.
func TestProperty(t *testing.T) {
	for name, ns := range map[string]newStore{"memstore": memStore, "localfs": localStore} {
		t.Run(name, func(t *testing.T) {
			rapid.Check(t, func(rt *rapid.T) { runProperty(rt, t, ns) })
		})
	}
}

func runProperty(rt *rapid.T, t *testing.T, ns newStore) {
	st, err := remotestore.New(remotestore.Options{Store: ns(t), SpoolDir: t.TempDir(), SpoolMemoryBytes: 512})
	if err != nil {
		rt.Fatal(err)
	}
	model := map[string][]byte{}
	ctx := context.Background()
	rt.Repeat(map[string]func(*rapid.T){
		"create": func(rt *rapid.T) {
			name := rapid.SampledFrom(propNames).Draw(rt, "name")
			data := rapid.SliceOfN(rapid.Byte(), 0, 3000).Draw(rt, "data")
			w, err := st.CreateObject(name)
			if err != nil {
				rt.Fatal(err)
			}
			for rest := data; len(rest) > 0; {
				n := rapid.IntRange(1, len(rest)).Draw(rt, "chunk")
				if _, err := w.Write(rest[:n]); err != nil {
					rt.Fatal(err)
				}
				rest = rest[n:]
			}
			if err := w.Close(); err != nil {
				rt.Fatal(err)
			}
			model[name] = data
		},
		"readRange": func(rt *rapid.T) {
			name := rapid.SampledFrom(propNames).Draw(rt, "name")
			want, ok := model[name]
			r, size, err := st.ReadObject(ctx, name)
			if !ok {
				if !st.IsNotExistError(err) || !strings.Contains(err.Error(), name) {
					rt.Fatalf("ReadObject(%s) of a missing object: %v", name, err)
				}
				return
			}
			if err != nil || size != int64(len(want)) {
				rt.Fatalf("ReadObject(%s) = %d, %v; want %d bytes", name, size, err, len(want))
			}
			defer r.Close()
			off := rapid.Int64Range(0, size+10).Draw(rt, "off")
			n := rapid.Int64Range(0, size+10).Draw(rt, "n")
			p := make([]byte, n)
			err = r.ReadAt(ctx, p, off)
			if off+n > size {
				if err == nil || !strings.Contains(err.Error(), name) {
					rt.Fatalf("ReadAt(%d, %d) past the end of %s (%d bytes): %v", off, n, name, size, err)
				}
				return
			}
			if err != nil || !bytes.Equal(p, want[off:off+n]) {
				rt.Fatalf("ReadAt(%d, %d) of %s: %v, bytes equal %v", off, n, name, err, bytes.Equal(p, want[off:off+n]))
			}
		},
		"size": func(rt *rapid.T) {
			name := rapid.SampledFrom(propNames).Draw(rt, "name")
			n, err := st.Size(name)
			if want, ok := model[name]; !ok {
				if !st.IsNotExistError(err) {
					rt.Fatalf("Size(%s) of a missing object: %v", name, err)
				}
			} else if err != nil || n != int64(len(want)) {
				rt.Fatalf("Size(%s) = %d, %v; want %d", name, n, err, len(want))
			}
		},
		"list": func(rt *rapid.T) {
			prefix := rapid.SampledFrom(propPrefixes).Draw(rt, "prefix")
			got, err := st.List(prefix, "")
			if err != nil {
				rt.Fatal(err)
			}
			want := []string{}
			for _, n := range slices.Sorted(maps.Keys(model)) {
				if strings.HasPrefix(n, prefix) {
					want = append(want, strings.TrimPrefix(n, prefix))
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				rt.Fatalf("List(%q) = %q, want %q", prefix, got, want)
			}
		},
		"delete": func(rt *rapid.T) {
			name := rapid.SampledFrom(propNames).Draw(rt, "name")
			if err := st.Delete(name); err != nil {
				rt.Fatal(err)
			}
			delete(model, name)
		},
	})
}
