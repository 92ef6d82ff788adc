package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
)

// The batch socket (OpenResponse.batch_socket, docs/protocol.md): one
// instance's Batch stream on a Unix socket of its own, without HTTP/2.
//
// The client writes BatchSocketPreface, then BatchRequest messages; the
// daemon writes BatchResponse messages and, when the stream ends, one
// status frame (a google.rpc.Status: the code and text a gRPC client gets
// as the call's status; code 0 when the client ended the stream), then
// closes the connection. Every message is framed as in gRPC's
// Length-Prefixed-Message: a flag byte, the length as 4 bytes big-endian,
// the message. The status frame's flag is grpc-web's trailer flag.
const (
	// BatchSocketPreface is what a client writes first: it names the
	// protocol and its revision, so that anything else (a gRPC client, a
	// typo'd path) is refused with a status saying what was expected.
	BatchSocketPreface = "stated-batch/1\n"
	// FrameMessage flags a frame that carries a BatchRequest or a
	// BatchResponse.
	FrameMessage byte = 0x00
	// FrameStatus flags the daemon's last frame: a google.rpc.Status.
	FrameStatus byte = 0x80
	// FrameHeaderSize is the flag byte and the 4-byte length.
	FrameHeaderSize = 5
)

// AppendFrameHeader appends the header of a frame of n bytes.
func AppendFrameHeader(b []byte, flag byte, n int) []byte {
	b = append(b, flag)
	return binary.BigEndian.AppendUint32(b, uint32(n))
}

// ErrFrameTooLarge is ReadFrameHeader's error for a length over its limit.
var ErrFrameTooLarge = errors.New("frame over the limit")

// ReadFrameHeader reads a frame's header from r: its flag and length. A
// length over limit is an error wrapping ErrFrameTooLarge that names both
// (nothing of the frame's body has been read then). A reader that ends
// before the first byte gives io.EOF; inside the header,
// io.ErrUnexpectedEOF.
func ReadFrameHeader(r io.Reader, hdr *[FrameHeaderSize]byte, limit int) (flag byte, n int, err error) {
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, 0, err
	}
	n64 := int64(binary.BigEndian.Uint32(hdr[1:]))
	if n64 > int64(limit) {
		return hdr[0], 0, fmt.Errorf("%w: %d bytes, the limit is %d bytes", ErrFrameTooLarge, n64, limit)
	}
	return hdr[0], int(n64), nil
}

// WriteFrame writes one frame of b to w in one system call where w allows
// (a header and body gathered); hdr is the caller's scratch for the header.
func WriteFrame(w io.Writer, hdr *[]byte, flag byte, b []byte) error {
	*hdr = AppendFrameHeader((*hdr)[:0], flag, len(b))
	bufs := net.Buffers{*hdr, b}
	_, err := bufs.WriteTo(w)
	return err
}
