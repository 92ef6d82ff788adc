// Package protocol holds what both ends of the Stated gRPC service agree on
// beyond stated.proto: the token header, the transport sizes, and the
// mapping between the API's messages and the backend's types.
//
// The server (package api) and the thin client (api/client) both import
// it, so it must stay small: it imports only the generated code
// (api/statedpb), backend's types and the standard library. Anything that
// needs the daemon belongs in api; a client-only program links none of it
// (api/client's TestNoServerDeps checks that).
package protocol
