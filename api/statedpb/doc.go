// Package statedpb is the Go code protoc generates from api/stated.proto
// (messages and the gRPC client and server stubs). Do not edit it by hand;
// run "go generate ./api".
package statedpb
