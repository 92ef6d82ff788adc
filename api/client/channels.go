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
	first := true
	pk := protocol.NewChannelPacker(channelChunkBytes, func(chunks []*pb.ChannelChunk) error {
		req := &pb.WriteChannelStateRequest{Chunks: chunks}
		if first {
			// The first request names the instance and checkpoint.
			req.InstanceId, req.Job, req.CheckpointId, first = in.id, in.task.Job, id, false
		}
		return stream.Send(req)
	})
	for _, ch := range chans {
		for _, buf := range ch.Buffers {
			b := &pb.ChannelBuffer{Records: make([]*pb.ChannelRecord, len(buf))}
			for i, r := range buf {
				b.Records[i] = &pb.ChannelRecord{KeyGroup: r.KeyGroup, Data: r.Data}
			}
			if err := pk.Add(ch.Channel, ch.Kind, b); err != nil {
				return closeErr(stream, err)
			}
		}
	}
	err = pk.Flush()
	if err == nil && pk.Sent() == 0 {
		// Nothing to write: the stream still names the instance, so that
		// the daemon checks it.
		err = stream.Send(&pb.WriteChannelStateRequest{InstanceId: in.id, Job: in.task.Job, CheckpointId: id})
	}
	if err != nil {
		return closeErr(stream, err)
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
