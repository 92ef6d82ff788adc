package catalog

import (
	"context"
	"fmt"

	"github.com/statedhq/stated/dstl"
	"github.com/statedhq/stated/tiered"
)

// maxSegmentSize bounds what verifySegment reads of one segment. The
// writer cuts segments at a few times its flush size (10 MiB by default);
// a segment past this is reported, not read.
const maxSegmentSize = 1 << 30

// verifySegment reads changelog segment name from logStore and checks it
// whole (header, trailer, index, every block's CRC), returning its size.
func verifySegment(ctx context.Context, logStore tiered.Store, name string) (int64, *FileProblem) {
	data, err := tiered.ReadAll(ctx, logStore, name, maxSegmentSize)
	if tiered.IsNotFound(err) {
		return 0, &FileProblem{Path: name, Missing: true}
	}
	if err != nil {
		return 0, &FileProblem{Path: name, Detail: "read changelog segment: " + err.Error()}
	}
	if _, err := dstl.DecodeSegment(name, data, nil); err != nil {
		return int64(len(data)), &FileProblem{Path: name, Detail: fmt.Sprintf("changelog segment: %v", err)}
	}
	return int64(len(data)), nil
}
