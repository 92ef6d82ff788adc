// Package rescale plans restores, and is the one place that does: what an
// instance restores from a checkpoint (PlanInstance: its own handle, or a
// rescale), the plan of an operator at a new parallelism (PlanOperator,
// PlanFrom), and which handle each key group comes from when an instance
// restores from several (Assign: the first listed that holds it), which
// every backend asks. The daemon resolves the checkpoint in the catalog and
// the backends carry the plan out.
//
// Key groups are the unit of rescale: a job's maxParallelism key groups are
// dealt out in contiguous ranges (backend.KeyGroupRangeForOperator), so a new
// subtask's range overlaps a few contiguous old ranges. The planner maps
// every new subtask to the old handles that overlap it, with the overlap per
// handle, the one with the largest overlap first: the backend restores that
// one as its base, clips it to the new range (range deletion or excise:
// cost independent of the keys removed) and adds the overlapping key groups
// of the others. The lsm backend downloads only the SSTs whose key-group
// bounds (FileRef.KeyGroupBounds) meet the new range, clips the base with
// Pebble's Excise and grafts the other handles' clipped tables into it
// instead of copying their keys (see backend/lsm/doc.go); with a download
// cache shared by the host's subtasks (lsm.DownloadCache) a file that
// several new subtasks need is read from checkpoint storage once.
//
// Operator (non-keyed) state is redistributed by mode: split deals the union
// of the elements out round-robin, union gives every subtask everything.
//
// Changing maxParallelism is refused: a key group cannot be split or merged.
package rescale
