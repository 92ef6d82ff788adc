package catalog

import (
	"errors"
	"fmt"

	"github.com/statedhq/stated/backend"
)

// Sentinel errors. They wrap the backend sentinels where one fits, so the
// api layer maps both to the same gRPC codes with errors.Is.
var (
	// ErrInvalidArgument: a malformed request (bad job or savepoint name, a
	// handle of another job, a file outside the layout).
	ErrInvalidArgument = fmt.Errorf("catalog: %w", backend.ErrInvalidArgument)
	// ErrNotFound: no such checkpoint, savepoint or file.
	ErrNotFound = fmt.Errorf("catalog: %w", backend.ErrNotFound)
	// ErrCorrupt: a manifest, catalog file or data file failed its checks.
	ErrCorrupt = fmt.Errorf("catalog: %w", backend.ErrCorrupt)
	// ErrExists: a checkpoint or savepoint id is already in use.
	ErrExists = errors.New("catalog: already exists")
	// ErrState: the operation does not fit the checkpoint's state (abort of
	// a completed checkpoint, complete of one that was never begun, two
	// concurrent completions of the same checkpoint).
	ErrState = errors.New("catalog: wrong checkpoint state")
	// ErrClosed: the catalog was closed.
	ErrClosed = errors.New("catalog: closed")
	// ErrFenced: a report or completion of an instance whose task was
	// opened again since (cluster mode): it holds a stale fencing token.
	// daemon.ErrFenced is this error, so a shared catalog that checks
	// tokens itself answers with the daemon's class.
	ErrFenced = errors.New("fenced")
)

// ErrorClass names a sentinel error, so that an error crossing a process
// boundary (the catalog service between nodes, the machine's image on
// disk) keeps what callers test with errors.Is. Names are frozen: nodes
// and images of other builds read them.
type ErrorClass struct {
	Name string
	Err  error
}

// ClassName is the name of the first class in classes (most specific
// first) that err wraps, or "".
func ClassName(err error, classes []ErrorClass) string {
	for _, c := range classes {
		if errors.Is(err, c.Err) {
			return c.Name
		}
	}
	return ""
}

// ClassedError is an error read back from its text and class name: it
// unwraps to the class's sentinel (nil when the name is unknown).
type ClassedError struct {
	Msg   string
	Class error
}

func (e *ClassedError) Error() string { return e.Msg }
func (e *ClassedError) Unwrap() error { return e.Class }

// ErrorOfClass is the error msg of the class named name in classes. known
// is false when name is set but not one of classes (a newer build's).
func ErrorOfClass(msg, name string, classes []ErrorClass) (err *ClassedError, known bool) {
	e := &ClassedError{Msg: msg}
	for _, c := range classes {
		if c.Name == name {
			e.Class = c.Err
			return e, true
		}
	}
	return e, name == ""
}
