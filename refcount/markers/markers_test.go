package markers

import (
	"context"
	"testing"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/memstore"
)

func TestParseMarker(t *testing.T) {
	obj := "j/shared/lsm/01ab-7-000005.sst"
	for _, c := range []struct {
		name string
		ok   bool
		want Marker
	}{
		{obj + ".ref.7.000005", true, Marker{Object: obj, Kind: MarkerPebble, Creator: 7}},
		{CheckpointMarker(obj, "my_job-1", 42, "ab12"), true, Marker{Object: obj, Kind: MarkerCheckpoint, Job: "my_job-1", Checkpoint: 42}},
		{InstanceMarker(obj, 99), true, Marker{Object: obj, Kind: MarkerInstance, Creator: 99}},
		{BaseMarker(obj, 99, 3), true, Marker{Object: obj, Kind: MarkerBase, Creator: 99, Base: 3}},
		{obj + ".ref.0.b_0_3", true, Marker{Object: obj}},
		{obj + ".ref.0.b_9", true, Marker{Object: obj}},
		{obj + ".ref.0.b_9_x", true, Marker{Object: obj}},
		{obj + ".ref.0.x_1", true, Marker{Object: obj}},
		{obj + ".ref.0.i_0", true, Marker{Object: obj}},
		{obj + ".ref.0.c_1_ab", true, Marker{Object: obj}},
		{obj + ".ref.zz", true, Marker{Object: obj}},
		{obj, false, Marker{}},
		{"j/shared/lsm/_live.7", false, Marker{}},
		{"j/shared/x.ref.7.1", false, Marker{}},
	} {
		got, ok := ParseMarker(c.name)
		if ok != c.ok || got != c.want {
			t.Errorf("ParseMarker(%q) = %+v, %v; want %+v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
	if c, ok := ParseLease(LeaseName("j/shared/lsm/", 12)); !ok || c != 12 {
		t.Errorf("lease round trip: %d, %v", c, ok)
	}
	if _, ok := ParseLease("j/shared/lsm/_live.0"); ok {
		t.Error("creator 0 accepted as a lease")
	}
	if c, ok := ParseHold(HoldName("j/shared/lsm/", 12)); !ok || c != 12 {
		t.Errorf("hold round trip: %d, %v", c, ok)
	}
	for _, n := range []string{"j/shared/lsm/_hold.0", "j/shared/lsm/_hold.x", LeaseName("j/shared/lsm/", 12)} {
		if _, ok := ParseHold(n); ok {
			t.Errorf("ParseHold(%q) accepted", n)
		}
	}
	if _, ok := ParseMarker(HoldName("j/shared/lsm/", 12)); ok {
		t.Error("a hold parsed as a marker")
	}
}

// TestHolds lists the holds of one prefix only.
func TestHolds(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	for _, n := range []string{HoldName("a/shared/lsm/", 3), HoldName("a/shared/lsm/", 4), HoldName("b/shared/lsm/", 5),
		LeaseName("a/shared/lsm/", 3), "a/shared/lsm/_hold.junk"} {
		if err := tiered.PutBytes(ctx, s, n, nil); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Holds(ctx, s, "a/shared/lsm/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range got {
		names = append(names, o.Name)
	}
	want := []string{HoldName("a/shared/lsm/", 3), HoldName("a/shared/lsm/", 4)}
	if len(names) != len(want) || names[0] != want[0] || names[1] != want[1] {
		t.Fatalf("holds of a/: %v, want %v", names, want)
	}
}

// TestUnref: markers are dropped as selected, unknown ones always stay,
// and the object goes only with the last marker.
func TestUnref(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	obj := "j/shared/lsm/01ab-7-000005.sst"
	for _, n := range []string{obj, obj + ".ref.7.000005", CheckpointMarker(obj, "j", 3, "a"), obj + ".ref.0.future"} {
		if err := tiered.PutBytes(ctx, s, n, nil); err != nil {
			t.Fatal(err)
		}
	}
	dropCheckpoints := func(m Marker) bool { return m.Kind == MarkerCheckpoint }
	if del, err := Unref(ctx, s, obj, dropCheckpoints); err != nil || del {
		t.Fatalf("deleted %v (%v) with Pebble's marker left", del, err)
	}
	if del, err := Unref(ctx, s, obj, func(Marker) bool { return true }); err != nil || del {
		t.Fatalf("deleted %v (%v) with an unknown marker left", del, err)
	}
	if err := s.Delete(ctx, obj+".ref.0.future"); err != nil {
		t.Fatal(err)
	}
	if del, err := Unref(ctx, s, obj, dropCheckpoints); err != nil || !del {
		t.Fatalf("not deleted (%v) with no marker left", err)
	}
	if _, err := s.Stat(ctx, obj); !tiered.IsNotFound(err) {
		t.Fatalf("object still there: %v", err)
	}
	if del, err := Unref(ctx, s, obj, dropCheckpoints); err != nil || !del {
		t.Fatalf("a second unref of a deleted object: %v, %v", del, err)
	}
}
