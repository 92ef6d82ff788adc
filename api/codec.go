package api

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// gRPC answers a request that does not parse with codes.Internal, which
// reads as a daemon bug. The server's codec therefore lets such a request
// through as an empty message that carries the parse error in a reserved
// unknown field, and the handlers (unary interceptor, Batch) answer it with
// codes.InvalidArgument and the error.

// malformedField is the reserved field number of the parse error.
const malformedField = protowire.MaxValidNumber

type lenientCodec struct{ base encoding.CodecV2 }

func (c lenientCodec) Name() string                           { return c.base.Name() }
func (c lenientCodec) Marshal(v any) (mem.BufferSlice, error) { return c.base.Marshal(v) }
func (c lenientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	err := c.base.Unmarshal(data, v)
	m, ok := v.(proto.Message)
	if err == nil || !ok {
		return err
	}
	proto.Reset(m)
	b := protowire.AppendTag(nil, malformedField, protowire.BytesType)
	b = protowire.AppendString(b, err.Error())
	m.ProtoReflect().SetUnknown(b)
	return nil
}

// malformed returns the InvalidArgument status of a request the codec
// could not parse, or nil.
func malformed(m any, what string) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil
	}
	raw := pm.ProtoReflect().GetUnknown()
	for len(raw) > 0 {
		num, typ, n := protowire.ConsumeTag(raw)
		if n < 0 {
			return nil
		}
		raw = raw[n:]
		if num == malformedField && typ == protowire.BytesType {
			msg, _ := protowire.ConsumeString(raw)
			return status.Errorf(codes.InvalidArgument, "stated: malformed %s message: %s", what, msg)
		}
		n = protowire.ConsumeFieldValue(num, typ, raw)
		if n < 0 {
			return nil
		}
		raw = raw[n:]
	}
	return nil
}

func unaryMalformed(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if err := malformed(req, fmt.Sprintf("%s request", info.FullMethod)); err != nil {
		return nil, err
	}
	return h(ctx, req)
}
