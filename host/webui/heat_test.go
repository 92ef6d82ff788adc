package webui

import (
	"strings"
	"testing"
)

// TestHeatStripBounded: a strip has one cell per key group up to
// maxCells, and beyond that one cell per run of key groups, their bytes
// summed, so the page stays small for 32768 key groups.
func TestHeatStripBounded(t *testing.T) {
	op := OperatorHeat{Operator: "op", KeyGroups: []KeyGroupSize{{KeyGroup: 5, Entries: 1, Bytes: 10}, {KeyGroup: 20, Entries: 2, Bytes: 30},
		{KeyGroup: 32767, Entries: 3, Bytes: 20}}}
	small := string(heatStrip(op, 128))
	if n := strings.Count(small, `<rect class="cell"`); n != 128 {
		t.Fatalf("128 key groups: %d cells", n)
	}
	big := string(heatStrip(op, 32768))
	if n := strings.Count(big, `<rect class="cell"`); n != maxCells {
		t.Fatalf("32768 key groups: %d cells, want %d", n, maxCells)
	}
	// Key groups 5 and 20 share the first cell (32 a cell): 40 bytes,
	// the darkest; 32767 is in the last.
	if !strings.Contains(big, `data-kg="0" data-last="31" data-bytes="40"`) || !strings.Contains(big, `data-kg="32736" data-last="32767" data-bytes="20"`) ||
		!strings.Contains(big, `fill="rgb(165, 15, 21)"><title>key groups 0-31: 3 entries`) {
		t.Fatalf("32768 key groups: the cells do not sum their key groups:\n%.600s", big)
	}
	if len(big) > 250<<10 {
		t.Fatalf("strip of %d bytes", len(big))
	}
}
