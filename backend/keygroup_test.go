package backend

import (
	"errors"
	"testing"

	"pgregory.net/rapid"
)

// flinkKeyGroups was computed by running Flink's MathUtils.murmurHash and
// KeyGroupRangeAssignment.computeKeyGroupForKeyHash, transcribed to Java
// (java.lang.Integer arithmetic), on this machine: {hash, maxParallelism,
// keyGroup}. The Go code is a separate implementation checked against it.
var flinkKeyGroups = [][3]int{
	{0, 128, 94},
	{0, 4096, 2526},
	{0, 32768, 31198},
	{0, 1, 0},
	{0, 7, 0},
	{1, 128, 86},
	{1, 4096, 4054},
	{1, 32768, 16342},
	{1, 1, 0},
	{1, 7, 2},
	{2, 128, 127},
	{2, 4096, 2943},
	{2, 32768, 15231},
	{2, 1, 0},
	{2, 7, 6},
	{3, 128, 113},
	{3, 4096, 2417},
	{3, 32768, 2417},
	{3, 1, 0},
	{3, 7, 3},
	{4, 128, 7},
	{4, 4096, 263},
	{4, 32768, 16647},
	{4, 1, 0},
	{4, 7, 6},
	{5, 128, 126},
	{5, 4096, 2942},
	{5, 32768, 15230},
	{5, 1, 0},
	{5, 7, 4},
	{6, 128, 18},
	{6, 4096, 3218},
	{6, 32768, 19602},
	{6, 1, 0},
	{6, 7, 0},
	{-1, 128, 80},
	{-1, 4096, 2896},
	{-1, 32768, 15184},
	{-1, 1, 0},
	{-1, 7, 5},
	{42, 128, 29},
	{42, 4096, 3613},
	{42, 32768, 28189},
	{42, 1, 0},
	{42, 7, 3},
	{1000000, 128, 17},
	{1000000, 4096, 785},
	{1000000, 32768, 29457},
	{1000000, 1, 0},
	{1000000, 7, 2},
	{2147483647, 128, 62},
	{2147483647, 4096, 3262},
	{2147483647, 32768, 19646},
	{2147483647, 1, 0},
	{2147483647, 7, 0},
	{-2147483648, 128, 108},
	{-2147483648, 4096, 2156},
	{-2147483648, 32768, 10348},
	{-2147483648, 1, 0},
	{-2147483648, 7, 3},
	{99162322, 128, 35},
	{99162322, 4096, 2723},
	{99162322, 32768, 31395},
	{99162322, 1, 0},
	{99162322, 7, 3},
	{-892482061, 128, 122},
	{-892482061, 4096, 122},
	{-892482061, 32768, 24698},
	{-892482061, 1, 0},
	{-892482061, 7, 4},
	{-123456789, 128, 93},
	{-123456789, 4096, 2781},
	{-123456789, 32768, 6877},
	{-123456789, 1, 0},
	{-123456789, 7, 4},
}

func TestKeyGroupForHashMatchesFlink(t *testing.T) {
	for _, c := range flinkKeyGroups {
		if got := KeyGroupForHash(int32(c[0]), c[1]); got != c[2] {
			t.Errorf("KeyGroupForHash(%d, %d) = %d, want %d", c[0], c[1], got, c[2])
		}
	}
}

// The published example: parallelism 5, maxParallelism 128, Integer keys
// 0..6 (hashCode = the value) land on subtasks 3,3,4,4,0,4,0.
func TestPublishedAssignmentExample(t *testing.T) {
	want := []int{3, 3, 4, 4, 0, 4, 0}
	for key, w := range want {
		kg := KeyGroupForHash(int32(key), 128)
		if got := OperatorForKeyGroup(128, 5, kg); got != w {
			t.Errorf("key %d: key group %d on subtask %d, want %d", key, kg, got, w)
		}
	}
}

// Ranges worked out by hand from Flink's KeyGroupRangeAssignment
// (start = ceil(i*max/p), end = floor(((i+1)*max-1)/p)), independent of
// the code under test.
func TestKeyGroupRangeForOperatorTable(t *testing.T) {
	for _, c := range []struct {
		maxP, p int
		want    []KeyGroupRange
	}{
		{128, 5, []KeyGroupRange{{0, 25}, {26, 51}, {52, 76}, {77, 102}, {103, 127}}},
		{10, 3, []KeyGroupRange{{0, 3}, {4, 6}, {7, 9}}},
		{4096, 3, []KeyGroupRange{{0, 1365}, {1366, 2730}, {2731, 4095}}},
		{128, 1, []KeyGroupRange{{0, 127}}},
		{4, 4, []KeyGroupRange{{0, 0}, {1, 1}, {2, 2}, {3, 3}}},
	} {
		for i, w := range c.want {
			if got := KeyGroupRangeForOperator(c.maxP, c.p, i); got != w {
				t.Errorf("max %d, parallelism %d, subtask %d: range %s, want %s", c.maxP, c.p, i, got, w)
			}
		}
	}
}

func TestRangesPartitionKeyGroups(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		maxP := rapid.IntRange(1, MaxMaxParallelism).Draw(t, "max")
		p := rapid.IntRange(1, min(maxP, 300)).Draw(t, "p")
		next := 0
		for i := 0; i < p; i++ {
			r := KeyGroupRangeForOperator(maxP, p, i)
			if r.Start != next || r.Empty() {
				t.Fatalf("subtask %d range %s does not start at %d or is empty", i, r, next)
			}
			for _, kg := range []int{r.Start, r.End, (r.Start + r.End) / 2} {
				if o := OperatorForKeyGroup(maxP, p, kg); o != i {
					t.Fatalf("key group %d in range of %d but OperatorForKeyGroup says %d", kg, i, o)
				}
			}
			next = r.End + 1
		}
		if next != maxP {
			t.Fatalf("ranges end at %d, want %d", next, maxP)
		}
	})
}

func TestKeyGroupForHashInRange(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := rapid.Int32().Draw(t, "h")
		maxP := rapid.IntRange(1, MaxMaxParallelism).Draw(t, "max")
		if kg := KeyGroupForHash(h, maxP); kg < 0 || kg >= maxP {
			t.Fatalf("key group %d outside [0,%d)", kg, maxP)
		}
	})
}

func TestRangeOps(t *testing.T) {
	a := KeyGroupRange{Start: 10, End: 20}
	if a.Len() != 11 || EmptyKeyGroupRange.Len() != 0 || !EmptyKeyGroupRange.Empty() {
		t.Fatal("Len/Empty wrong")
	}
	if got := a.Intersect(KeyGroupRange{Start: 15, End: 30}); got != (KeyGroupRange{Start: 15, End: 20}) {
		t.Fatalf("intersect = %s", got)
	}
	if !a.Intersect(KeyGroupRange{Start: 21, End: 30}).Empty() {
		t.Fatal("disjoint intersect not empty")
	}
	if !a.Covers(KeyGroupRange{Start: 10, End: 20}) || a.Covers(KeyGroupRange{Start: 9, End: 20}) {
		t.Fatal("Covers wrong")
	}
	for _, bad := range []KeyGroupRange{{Start: -1, End: 3}, {Start: 3, End: 2}, {Start: 0, End: 128}} {
		if err := bad.Validate(128); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("Validate(%v) = %v", bad, err)
		}
	}
	if err := ValidateParallelism(128, 129); !errors.Is(err, ErrInvalidArgument) {
		t.Error("parallelism above max accepted")
	}
}
