package cost_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cost"
)

func TestKinds(t *testing.T) {
	for _, c := range []struct {
		op   string
		want cost.Kind
	}{
		{"PutObject", cost.Put}, {"UploadPart", cost.Put}, {"CreateMultipartUpload", cost.Put},
		{"CompleteMultipartUpload", cost.Put}, {"CopyObject", cost.Put}, {"SomethingNew", cost.Put},
		{"GetObject", cost.Get}, {"HeadObject", cost.Head}, {"HeadBucket", cost.Head},
		{"ListObjectsV2", cost.List}, {"ListParts", cost.List},
		{"DeleteObject", cost.Delete}, {"DeleteObjects", cost.Delete}, {"AbortMultipartUpload", cost.Delete},
	} {
		if got := cost.S3Kind(c.op); got != c.want {
			t.Errorf("S3Kind(%s) = %s, want %s", c.op, got, c.want)
		}
	}
	ops := map[tiered.Op]cost.Kind{tiered.OpPut: cost.Put, tiered.OpPutIfAbsent: cost.Put, tiered.OpGet: cost.Get,
		tiered.OpGetRange: cost.Get, tiered.OpStat: cost.Head, tiered.OpList: cost.List,
		tiered.OpDelete: cost.Delete, tiered.OpDeleteBatch: cost.Delete}
	if len(ops) != int(tiered.NumOps) {
		t.Fatalf("the table lists %d of %d ops", len(ops), tiered.NumOps)
	}
	for op, want := range ops {
		if got := cost.OpKind(op); got != want {
			t.Errorf("OpKind(%s) = %s, want %s", op, got, want)
		}
	}
	for k := range cost.NumKinds {
		if got, err := cost.ParseKind(strings.ToUpper(k.String())); err != nil || got != k {
			t.Errorf("ParseKind(%s) = %v, %v", k, got, err)
		}
	}
	if _, err := cost.ParseKind("post"); err == nil {
		t.Error("ParseKind accepted post")
	}
}

func TestCounter(t *testing.T) {
	var c cost.Counter
	c.Request(cost.Put, false)
	c.Request(cost.Put, true)
	c.Throttle(cost.Put)
	c.Request(cost.Get, false)
	before := c.Counts()
	c.Request(cost.List, false)
	got := c.Counts()
	if got.Total() != 4 || got.Requests[cost.Put] != 2 || got.Retries[cost.Put] != 1 || got.TotalThrottled() != 1 {
		t.Fatalf("counts %+v", got)
	}
	d := got.Sub(before)
	if d.Total() != 1 || d.Requests[cost.List] != 1 || d.TotalThrottled() != 0 {
		t.Fatalf("difference %+v", d)
	}
	if s := d.Add(before); s != got {
		t.Fatalf("before + difference = %+v, want %+v", s, got)
	}
}

func TestParsePrices(t *testing.T) {
	p, err := cost.ParsePrices("", cost.S3Standard)
	if err != nil || p != cost.S3Standard {
		t.Fatalf("empty: %v, %v", p, err)
	}
	p, err = cost.ParsePrices(" PUT=0.0045, storage=0.021 ,delete=0", cost.S3Standard)
	if err != nil {
		t.Fatal(err)
	}
	want := cost.S3Standard
	want.PerThousand[cost.Put], want.StorageGBMonth = 0.0045, 0.021
	if p != want {
		t.Fatalf("got %v, want %v", p, want)
	}
	// String round-trips.
	if q, err := cost.ParsePrices(p.String(), cost.Prices{}); err != nil || q != p {
		t.Fatalf("round trip of %s: %v, %v", p, q, err)
	}
	// Every problem at once, each named.
	_, err = cost.ParsePrices("put=-1,post=2,get,head=x,get=1,get=2", cost.S3Standard)
	if err == nil {
		t.Fatal("bad prices accepted")
	}
	for _, w := range []string{"put=", "post", `"get"`, "head=", "get is given twice"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not name %s", err, w)
		}
	}
	if err := cost.S3Standard.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := cost.S3Standard
	bad.PerThousand[cost.Get], bad.StorageGBMonth = math.NaN(), -1
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "get") || !strings.Contains(err.Error(), "storage") {
		t.Fatalf("validate: %v", err)
	}
}

func TestMonthly(t *testing.T) {
	var c cost.Counts
	c.Requests[cost.Put] = 1000   // in one hour: 730,000 a month, $3.65
	c.Requests[cost.Get] = 10000  // 7.3 million a month, $2.92
	c.Requests[cost.Delete] = 500 // free
	e := cost.S3Standard.Monthly(c, time.Hour, 10*cost.GB)
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("put", e.Requests[cost.Put], 3.65)
	near("get", e.Requests[cost.Get], 2.92)
	near("delete", e.Requests[cost.Delete], 0)
	near("storage", e.Storage, 0.23)
	near("total", e.Total(), 3.65+2.92+0.23)
	// No elapsed time: the counts as they are.
	near("unscaled put", cost.S3Standard.Monthly(c, 0, 0).Requests[cost.Put], 0.005)
}

func TestWindow(t *testing.T) {
	w := cost.NewWindow(time.Hour, time.Minute)
	t0 := time.Unix(1_000_000, 0)
	at := func(min int, puts uint64, cps uint64) cost.Sample {
		var c cost.Counts
		c.Requests[cost.Put] = puts
		return cost.Sample{At: t0.Add(time.Duration(min) * time.Minute), Requests: c, Checkpoints: cps}
	}
	if d := w.Since(at(0, 0, 0)); d != (cost.Delta{}) {
		t.Fatalf("empty window: %+v", d)
	}
	// 10 puts a minute, a checkpoint a minute, for two hours; an extra
	// observation within a step is ignored.
	for m := 0; m <= 120; m++ {
		w.Observe(at(m, uint64(10*m), uint64(m)))
		w.Observe(at(m, uint64(10*m+5), uint64(m)))
	}
	d := w.Since(at(121, 1210, 121))
	if d.Elapsed != 61*time.Minute || d.Requests.Requests[cost.Put] != 610 || d.Checkpoints != 61 {
		t.Fatalf("last hour: %+v", d)
	}
	if got := d.PerCheckpoint(cost.Put); got != 10 {
		t.Fatalf("per checkpoint %v", got)
	}
	if got := d.PerSecond(cost.Put); math.Abs(got-10.0/60) > 1e-9 {
		t.Fatalf("per second %v", got)
	}
}
