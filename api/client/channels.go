package client

import (
	"context"
	"errors"
	"io"

	"github.com/statedhq/stated/api/protocol"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
)

// ChannelRecord is one record of in-flight data.
type ChannelRecord struct {
	// KeyGroup is the record's key group on keyed channels (0 on the
	// others): a rescale hands the record to the subtask that owns it.
	KeyGroup int32
	Data     []byte
}

// ChannelState is one channel's in-flight buffers, in order.
type ChannelState struct {
	Channel backend.ChannelID
	Kind    backend.ChannelKind
	Buffers [][]ChannelRecord
}

// channelChunkBytes bounds the payload of one WriteChannelState request,
// well under the daemon's message limit.
const channelChunkBytes = 1 << 20

// WriteChannelState stores the instance's channel state for checkpoint id
// (an unaligned checkpoint's in-flight buffers). Call it before the
// snapshot of id: the snapshot then holds it. It may be called several
// times; a channel's buffers are appended in call order.
func (in *Instance) WriteChannelState(ctx context.Context, id uint64, chans []ChannelState) error {
	stream, err := in.c.rpc.WriteChannelState(ctx)
	if err != nil {
		return err
	}
	req := &pb.WriteChannelStateRequest{InstanceId: in.id, Job: in.task.Job, CheckpointId: id}
	size := 0
	send := func() error {
		err := stream.Send(req)
		req, size = &pb.WriteChannelStateRequest{}, 0
		return err
	}
	sent := false
	for _, ch := range chans {
		var cur *pb.ChannelChunk
		for _, buf := range ch.Buffers {
			n := 16
			for _, r := range buf {
				n += len(r.Data) + 16
			}
			if size > 0 && size+n > channelChunkBytes {
				if err := send(); err != nil {
					return closeErr(stream, err)
				}
				sent, cur = true, nil
			}
			if cur == nil {
				cur = &pb.ChannelChunk{Channel: protocol.ChannelToPB(ch.Channel), Kind: protocol.ChannelKindToPB(ch.Kind)}
				req.Chunks = append(req.Chunks, cur)
			}
			b := &pb.ChannelBuffer{Records: make([]*pb.ChannelRecord, len(buf))}
			for i, r := range buf {
				b.Records[i] = &pb.ChannelRecord{KeyGroup: r.KeyGroup, Data: r.Data}
			}
			cur.Buffers = append(cur.Buffers, b)
			size += n
		}
	}
	if size > 0 || !sent {
		if err := send(); err != nil {
			return closeErr(stream, err)
		}
	}
	_, err = stream.CloseAndRecv()
	return err
}

// closeErr returns the stream's status after a failed Send: the daemon's
// error, not the io.EOF that Send reports.
func closeErr(stream pb.Stated_WriteChannelStateClient, err error) error {
	if errors.Is(err, io.EOF) {
		if _, rerr := stream.CloseAndRecv(); rerr != nil {
			return rerr
		}
	}
	return err
}

// ReadChannelState returns the channel state the instance restored (Open
// with Restore), channel by channel, each channel's buffers in order;
// none for a restore of an aligned checkpoint or without channel state.
func (in *Instance) ReadChannelState(ctx context.Context) ([]ChannelState, error) {
	stream, err := in.c.rpc.ReadChannelState(ctx, &pb.ReadChannelStateRequest{InstanceId: in.id, Job: in.task.Job})
	if err != nil {
		return nil, err
	}
	var out []ChannelState
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		for _, c := range resp.GetChunks() {
			id := protocol.ChannelFromPB(c.GetChannel())
			kind, err := protocol.ChannelKindFromPB(c.GetKind())
			if err != nil {
				return nil, err
			}
			if len(out) == 0 || out[len(out)-1].Channel != id {
				out = append(out, ChannelState{Channel: id, Kind: kind})
			}
			last := &out[len(out)-1]
			for _, b := range c.GetBuffers() {
				buf := make([]ChannelRecord, len(b.GetRecords()))
				for i, r := range b.GetRecords() {
					buf[i] = ChannelRecord{KeyGroup: r.GetKeyGroup(), Data: r.GetData()}
				}
				last.Buffers = append(last.Buffers, buf)
			}
		}
	}
}
