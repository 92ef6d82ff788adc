package client

import (
	"context"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// noDaemonHint returns interceptors that add to an error of a call that
// found no daemon at addr (gRPC's bare "Unavailable ... no such file or
// directory" or "connection refused") what to check. The code stays
// codes.Unavailable, so callers that retry on it still do.
func noDaemonHint(addr, target string) (grpc.UnaryClientInterceptor, grpc.StreamClientInterceptor) {
	hint := "is `stated serve` running? socket " + strings.TrimPrefix(target, "unix://")
	if _, tcp := tcpHost(target); tcp {
		hint = "is `stated serve --listen " + addr + "` running, and the address reachable?"
	}
	explain := func(err error) error {
		st, ok := status.FromError(err)
		if !ok || st.Code() != codes.Unavailable || !noDaemon(st.Message()) {
			return err
		}
		return status.Errorf(codes.Unavailable, "client: no daemon at %s (%s): %s", addr, hint, st.Message())
	}
	unary := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return explain(invoker(ctx, method, req, reply, cc, opts...))
	}
	stream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		return s, explain(err)
	}
	return unary, stream
}

// noDaemon says whether a transport error means nothing listens there.
func noDaemon(msg string) bool {
	for _, s := range []string{"no such file or directory", "connection refused", "connect: no such host"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
