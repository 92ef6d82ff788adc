package cluster

import (
	"context"
	"fmt"
	"time"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	pb "github.com/statedhq/stated/cluster/clusterpb"
)

// The catalog service's messages are the Catalog service of
// cluster/proto. This file converts between them and the
// catalog's own types; handles and manifests travel in their own
// checksummed encodings (backend.EncodeHandle, catalog.EncodeManifest).

// maxAnswerSize bounds an answer a CatalogClient reads: a manifest of many
// tasks, with room.
const maxAnswerSize = 64 << 20

func toTaskID(t backend.TaskID) *pb.TaskId {
	return &pb.TaskId{Job: t.Job, Operator: t.Operator, Subtask: int64(t.Subtask)}
}

func fromTaskID(t *pb.TaskId) backend.TaskID {
	return backend.TaskID{Job: t.GetJob(), Operator: t.GetOperator(), Subtask: int(t.GetSubtask())}
}

func toTaskIDs(ts []backend.TaskID) []*pb.TaskId {
	if len(ts) == 0 {
		return nil
	}
	out := make([]*pb.TaskId, len(ts))
	for i, t := range ts {
		out[i] = toTaskID(t)
	}
	return out
}

func fromTaskIDs(ts []*pb.TaskId) []backend.TaskID {
	if len(ts) == 0 {
		return nil
	}
	out := make([]backend.TaskID, len(ts))
	for i, t := range ts {
		out[i] = fromTaskID(t)
	}
	return out
}

// unixNano is t in Unix nanoseconds, 0 for the zero time.
func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// toWireRecords carries the records with what the catalog computes when
// it lists the history (retained, owner, pinned, damaged), which the
// records' own encoding leaves out and a caller of List needs.
func toWireRecords(rs []catalog.Record) []*pb.CheckpointRecord {
	out := make([]*pb.CheckpointRecord, len(rs))
	for i, r := range rs {
		out[i] = &pb.CheckpointRecord{Id: r.ID, Status: string(r.Status), StartedUnixNano: unixNano(r.Started), EndedUnixNano: unixNano(r.Ended),
			CheckpointedSize: r.CheckpointedSize, FullSize: r.FullSize, Tasks: int64(r.Tasks), Reason: r.Reason,
			WithoutChannelState: r.WithoutChannelState, Retained: r.Retained, Owner: r.Owner, Pinned: r.Pinned, Damaged: toWire(r.Damaged)}
		if st := r.Stats; st != (catalog.CheckpointStats{}) {
			out[i].Stats = &pb.CheckpointStats{Unaligned: st.Unaligned, AlignmentMicros: st.AlignmentMicros, StartDelayMicros: st.StartDelayMicros,
				SyncMicros: st.SyncMicros, AsyncMicros: st.AsyncMicros, InFlightBytes: st.InFlightBytes}
		}
	}
	return out
}

func fromWireRecords(ws []*pb.CheckpointRecord) []catalog.Record {
	out := make([]catalog.Record, len(ws))
	for i, w := range ws {
		r := catalog.Record{ID: w.GetId(), Status: catalog.Status(w.GetStatus()), Started: fromUnixNano(w.GetStartedUnixNano()),
			Ended: fromUnixNano(w.GetEndedUnixNano()), CheckpointedSize: w.GetCheckpointedSize(), FullSize: w.GetFullSize(),
			Tasks: int(w.GetTasks()), Reason: w.GetReason(), WithoutChannelState: w.GetWithoutChannelState(),
			Retained: w.GetRetained(), Owner: w.GetOwner(), Pinned: w.GetPinned(), Damaged: fromWire(w.GetDamaged())}
		if st := w.GetStats(); st != nil {
			r.Stats = catalog.CheckpointStats{TaskStats: backend.TaskStats{Unaligned: st.GetUnaligned(), AlignmentMicros: st.GetAlignmentMicros(),
				StartDelayMicros: st.GetStartDelayMicros(), SyncMicros: st.GetSyncMicros(), AsyncMicros: st.GetAsyncMicros()},
				InFlightBytes: st.GetInFlightBytes()}
		}
		out[i] = r
	}
	return out
}

// kinds maps class names to sentinels, most specific first: the catalog's
// wrap the backend's, so a catalog error is named by the catalog's. The
// names are frozen: nodes of different builds may talk to each other.
var kinds = []catalog.ErrorClass{
	{Name: "catalog-invalid", Err: catalog.ErrInvalidArgument},
	{Name: "catalog-not-found", Err: catalog.ErrNotFound},
	{Name: "catalog-corrupt", Err: catalog.ErrCorrupt},
	{Name: "catalog-exists", Err: catalog.ErrExists},
	{Name: "catalog-state", Err: catalog.ErrState},
	{Name: "catalog-closed", Err: catalog.ErrClosed},
	{Name: "fenced", Err: catalog.ErrFenced},
	{Name: "incompatible", Err: backend.ErrIncompatible},
	{Name: "invalid", Err: backend.ErrInvalidArgument},
	{Name: "not-found", Err: backend.ErrNotFound},
	{Name: "corrupt", Err: backend.ErrCorrupt},
	{Name: "declined", Err: backend.ErrDeclined},
	{Name: "exhausted", Err: backend.ErrResourceExhausted},
	{Name: "deadline", Err: context.DeadlineExceeded},
	{Name: "canceled", Err: context.Canceled},
}

// toWire is err with its class: the sentinel it wraps (nil: none).
func toWire(err error) *pb.CatalogError {
	if err == nil {
		return nil
	}
	return &pb.CatalogError{Msg: err.Error(), Kind: catalog.ClassName(err, kinds)}
}

// fromWire is the error w names, wrapping its class's sentinel (nil for
// nil).
func fromWire(w *pb.CatalogError) error {
	if w == nil {
		return nil
	}
	e, known := catalog.ErrorOfClass(w.GetMsg(), w.GetKind(), kinds)
	if !known {
		// A class this build does not know (a newer node): keep the text.
		e.Msg = fmt.Sprintf("%s (class %s)", w.GetMsg(), w.GetKind())
	}
	return e
}
