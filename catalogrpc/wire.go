package catalogrpc

import (
	"context"
	"errors"
	"fmt"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
)

// Method names, frozen: nodes of different builds may talk to each other.
const (
	mBegin        = "begin"
	mReport       = "report"
	mComplete     = "complete"
	mAbort        = "abort"
	mRelease      = "release"
	mCheckpoint   = "checkpoint"
	mLatest       = "latest"
	mSavepoint    = "savepoint"
	mRetained     = "retained"
	mList         = "list"
	mRestore      = "restore"
	mNoteNoChans  = "note-without-channel-state"
	mReleaseLog   = "release-log"
	mEpoch        = "epoch"
	mJobs         = "jobs"
	mProblems     = "problems"
	mSavepoints   = "savepoints"
	mSavepointOf  = "savepoint-from-checkpoint"
	maxAnswerSize = 64 << 20 // a manifest of many tasks, with room
)

// request is every method's argument; each uses the fields it names.
type request struct {
	Job    string `json:"job,omitempty"`
	ID     uint64 `json:"id,omitempty"`
	Handle []byte `json:"handle,omitempty"` // backend.EncodeHandle
	// Token is the fencing token a report was made under (0: none).
	Token uint64 `json:"token,omitempty"`
	// Fences are the tokens a completion's caller holds its tasks under.
	Fences []Fence `json:"fences,omitempty"`
	// Reports are a completion's handles of its caller's own tasks not
	// reported yet (CompleteWithReports), each under its token.
	Reports []wireReport     `json:"reports,omitempty"`
	Tasks   []backend.TaskID `json:"tasks,omitempty"`
	Status  catalog.Status   `json:"status,omitempty"`
	Reason  string           `json:"reason,omitempty"`
	Savept  string           `json:"savepoint,omitempty"`
	Names   []string         `json:"names,omitempty"`
	Restore *restoreRequest  `json:"restore,omitempty"`
}

// wireReport is one report a completion carries.
type wireReport struct {
	Handle []byte `json:"handle"` // backend.EncodeHandle
	Token  uint64 `json:"token,omitempty"`
}

type restoreRequest struct {
	Job           string       `json:"job"`
	FromJob       string       `json:"fromJob,omitempty"`
	CheckpointID  uint64       `json:"checkpointId,omitempty"`
	SavepointID   string       `json:"savepointId,omitempty"`
	Mode          catalog.Mode `json:"mode,omitempty"`
	AllowFallback bool         `json:"allowFallback,omitempty"`
}

// answer is every method's result.
type answer struct {
	// Epoch identifies the catalog that answered (see the package doc).
	Epoch    uint64         `json:"epoch"`
	Err      *wireError     `json:"err,omitempty"`
	Found    bool           `json:"found,omitempty"`
	Manifest []byte         `json:"manifest,omitempty"` // catalog.EncodeManifest
	IDs      []uint64       `json:"ids,omitempty"`
	Records  []wireRecord   `json:"records,omitempty"`
	Restore  *restoreAnswer `json:"restore,omitempty"`
	Names    []string       `json:"names,omitempty"`
	Problems []problem      `json:"problems,omitempty"`
	// Manifests are encoded manifests (catalog.EncodeManifest).
	Manifests [][]byte `json:"manifests,omitempty"`
}

// wireRecord is a catalog.Record on the wire: the record's own encoding
// leaves out what the catalog computes when it lists the history
// (retained, owner, pinned, damaged), which a caller of List needs.
type wireRecord struct {
	catalog.Record
	Retained bool       `json:"retained,omitempty"`
	Owner    string     `json:"owner,omitempty"`
	Pinned   bool       `json:"pinned,omitempty"`
	Damaged  *wireError `json:"damaged,omitempty"`
}

func toWireRecords(rs []catalog.Record) []wireRecord {
	out := make([]wireRecord, len(rs))
	for i, r := range rs {
		out[i] = wireRecord{Record: r, Retained: r.Retained, Owner: r.Owner, Pinned: r.Pinned, Damaged: toWire(r.Damaged)}
	}
	return out
}

func fromWireRecords(ws []wireRecord) []catalog.Record {
	out := make([]catalog.Record, len(ws))
	for i, w := range ws {
		r := w.Record
		r.Retained, r.Owner, r.Pinned, r.Damaged = w.Retained, w.Owner, w.Pinned, w.Damaged.err()
		out[i] = r
	}
	return out
}

type problem struct {
	What   string     `json:"what"`
	Object string     `json:"object"`
	Job    string     `json:"job,omitempty"`
	Err    *wireError `json:"err,omitempty"`
	Effect string     `json:"effect,omitempty"`
}

type restoreAnswer struct {
	NoClaim bool     `json:"noClaim,omitempty"`
	Skipped []damage `json:"skipped,omitempty"`
	// Savepoint: the restore reads from the savepoint's directory, not the
	// checkpoint root.
	Savepoint string `json:"savepoint,omitempty"`
}

type damage struct {
	Job      string `json:"job"`
	ID       uint64 `json:"id"`
	Manifest string `json:"manifest"`
	Err      string `json:"err"`
}

// wireError is an error with its class: the sentinel it wraps.
type wireError struct {
	Kind string `json:"kind,omitempty"`
	Msg  string `json:"msg"`
}

// kinds maps class names to sentinels, most specific first: the catalog's
// wrap the backend's, so a catalog error is named by the catalog's.
var kinds = []struct {
	name string
	err  error
}{
	{"catalog-invalid", catalog.ErrInvalidArgument},
	{"catalog-not-found", catalog.ErrNotFound},
	{"catalog-corrupt", catalog.ErrCorrupt},
	{"catalog-exists", catalog.ErrExists},
	{"catalog-state", catalog.ErrState},
	{"catalog-closed", catalog.ErrClosed},
	{"fenced", catalog.ErrFenced},
	{"incompatible", backend.ErrIncompatible},
	{"invalid", backend.ErrInvalidArgument},
	{"not-found", backend.ErrNotFound},
	{"corrupt", backend.ErrCorrupt},
	{"declined", backend.ErrDeclined},
	{"exhausted", backend.ErrResourceExhausted},
	{"deadline", context.DeadlineExceeded},
	{"canceled", context.Canceled},
}

func toWire(err error) *wireError {
	if err == nil {
		return nil
	}
	w := &wireError{Msg: err.Error()}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			w.Kind = k.name
			break
		}
	}
	return w
}

// remoteError is an error the hosting catalog returned.
type remoteError struct {
	msg   string
	class error // nil: none known
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.class }

func (w *wireError) err() error {
	if w == nil {
		return nil
	}
	e := &remoteError{msg: w.Msg}
	for _, k := range kinds {
		if k.name == w.Kind {
			e.class = k.err
		}
	}
	if e.class == nil && w.Kind != "" {
		// A class this build does not know (a newer node): keep the text.
		e.msg = fmt.Sprintf("%s (class %s)", w.Msg, w.Kind)
	}
	return e
}
