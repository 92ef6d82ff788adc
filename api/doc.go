// Package api is stated's gRPC service: the protobuf definition
// (stated.proto, generated code in statedpb), the server that maps it onto
// the daemon's instances, and, in api/client, the Go thin client. What
// both ends share (token header, transport sizes, message converters) is
// in api/protocol, so that the client links none of the server.
//
// The Batch stream, the hot path, does not go through the generated
// message types: api/internal/wire encodes and decodes BatchRequest and
// BatchResponse by hand, byte for byte the protobuf encoding of
// stated.proto, so other languages use their generated code unchanged.
//
// Regenerate statedpb after editing stated.proto (protoc 3.21+,
// protoc-gen-go v1.36.12, protoc-gen-go-grpc v1.6.2 on PATH):
//
//	go generate ./api
//
// A snapshot barrier (BatchRequest.snapshot) is applied by the stream that
// carries it, after the request's operations (apply.go): that is what
// orders checkpoints with writes for every client.
//
// A change to Op, Result, BatchRequest, SnapshotBarrier or BatchResponse
// must be made in api/internal/wire too; its tests compare both encodings both ways and
// fail until it is.
package api

//go:generate protoc --go_out=. --go_opt=module=github.com/statedhq/stated/api --go-grpc_out=. --go-grpc_opt=module=github.com/statedhq/stated/api stated.proto
