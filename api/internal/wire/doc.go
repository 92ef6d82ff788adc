// Package wire encodes and decodes the two messages of the Batch stream
// (stated.v1.BatchRequest and BatchResponse) by hand, in exactly the
// protobuf encoding stated.proto defines, so that any protobuf client can
// still talk to the daemon. The generated code allocates a message per
// operation and per result and walks them by reflection; a batch of a
// thousand operations then costs more than applying it. Here an operation is
// appended to one byte slice, and decoding yields views into the received
// bytes, reusing one slice of operations per stream.
//
// Encoders write proto3 canonical form (zero values left out); decoders
// accept fields in any order, repeated singular fields (the last wins), and
// skip unknown fields and fields with an unexpected wire type, as protobuf
// parsers do. wire_test checks both directions against the generated code.
package wire
