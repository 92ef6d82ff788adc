package checkpointsim

import (
	"strings"
	"testing"
	"time"
)

func TestOptionsDefaults(t *testing.T) {
	var o Options
	o.EnsureDefaults()
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(o.Modes) != 3 || len(o.Debloat) != 2 || o.Parallelism != DefaultParallelism || o.SinkCost != DefaultSinkCost {
		t.Fatalf("defaults: %+v", o)
	}
}

func TestOptionsValidate(t *testing.T) {
	o := Options{Modes: []Mode{"sideways", ModeAligned, ModeAligned}, Debloat: []bool{true, true}, Parallelism: -1,
		Buffers: -2, SourceRate: -1, Interval: time.Microsecond, Records: -5, Backend: "rocks", Token: "x", Job: "a/b"}
	o.EnsureDefaults()
	err := o.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{`mode "sideways"`, "mode aligned is listed twice", "debloat settings", "parallelism -1",
		"buffers -2", "source rate -1", "interval 1µs", "records -5", `backend "rocks"`, "token without addr", `job "a/b"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	big := Options{Parallelism: 64, Buffers: 100, RecordsPerBuffer: 100}
	big.EnsureDefaults()
	if err := big.Validate(); err == nil || !strings.Contains(err.Error(), "records in flight at most") {
		t.Errorf("64 x 64 channels of 10,000 records: %v", err)
	}
	if _, err := ParseMode("all"); err != nil {
		t.Error(err)
	}
	if _, err := ParseMode("x"); err == nil {
		t.Error("mode x accepted")
	}
}

func TestDecodeRecord(t *testing.T) {
	kgs := []int32{7, 8, 9}
	for _, r := range []record{{src: 1, seq: 12345, key: 2, window: -1, kg: 9}, {window: 3, key: 1, count: 44, kg: 8}} {
		got, err := decodeRecord(r.encode(), len(kgs), kgs)
		if err != nil || got != r {
			t.Errorf("round trip of %+v: %+v, %v", r, got, err)
		}
	}
	for _, b := range [][]byte{nil, {9, 1, 1, 1}, {encSource, 1, 1}, {encSource, 1, 1, 5}, {encResult, 1, 1, 1, 0}, {encSource, 0x80}} {
		if _, err := decodeRecord(b, len(kgs), kgs); err == nil {
			t.Errorf("%x decoded", b)
		}
	}
}

func TestKeyIndex(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int
		ok   bool
	}{{"k0000042", 42, true}, {"k1", 1, true}, {"", 0, false}, {"k", 0, false}, {"x12", 0, false}, {"k-3", 0, false}, {"k1x", 0, false}} {
		got, err := keyIndex([]byte(c.in))
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("keyIndex(%q) = %d, %v", c.in, got, err)
		}
	}
}
