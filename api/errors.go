package api

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/catalog"
	"github.com/statedhq/stated/daemon"
	"github.com/statedhq/stated/rescale"
	"github.com/statedhq/stated/tiered"
)

// Code maps an error of the daemon or a backend to its gRPC code. The
// order matters where an error wraps several sentinels: data loss first.
func Code(err error) codes.Code {
	if err == nil {
		return codes.OK
	}
	if s, ok := status.FromError(err); ok && s.Code() != codes.Unknown {
		return s.Code()
	}
	switch {
	case errors.Is(err, backend.ErrCorrupt):
		return codes.DataLoss
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		return codes.Canceled
	case errors.Is(err, daemon.ErrUnauthenticated):
		return codes.Unauthenticated
	case errors.Is(err, daemon.ErrPermissionDenied):
		return codes.PermissionDenied
	case errors.Is(err, daemon.ErrUnknownInstance), errors.Is(err, backend.ErrNotFound), errors.Is(err, tiered.ErrNotFound):
		return codes.NotFound
	case errors.Is(err, daemon.ErrLimit), errors.Is(err, backend.ErrResourceExhausted):
		return codes.ResourceExhausted
	case errors.Is(err, catalog.ErrExists):
		return codes.AlreadyExists
	case errors.Is(err, daemon.ErrShuttingDown), errors.Is(err, catalog.ErrClosed):
		return codes.Unavailable
	case errors.Is(err, daemon.ErrUnsupported):
		return codes.Unimplemented
	case errors.Is(err, daemon.ErrAlreadyOpen), errors.Is(err, daemon.ErrCheckpointFailed), errors.Is(err, daemon.ErrFenced),
		errors.Is(err, daemon.ErrSnapshotGone), errors.Is(err, backend.ErrIncompatible),
		errors.Is(err, backend.ErrDeclined), errors.Is(err, backend.ErrClosed), errors.Is(err, catalog.ErrState),
		errors.Is(err, rescale.ErrMaxParallelismChanged):
		return codes.FailedPrecondition
	case errors.Is(err, backend.ErrInvalidArgument), errors.Is(err, backend.ErrUnknownState),
		errors.Is(err, backend.ErrWrongKind), errors.Is(err, backend.ErrKeyGroupOutOfRange),
		errors.Is(err, tiered.ErrInvalidName):
		return codes.InvalidArgument
	}
	return codes.Internal
}

// toStatus turns err into a gRPC status error with its code; the message
// is the error's, which names what was wrong.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(Code(err), err.Error())
}
