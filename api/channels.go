package api

import (
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/statedhq/stated/api/protocol"
	pb "github.com/statedhq/stated/api/statedpb"
	"github.com/statedhq/stated/backend"
	"github.com/statedhq/stated/chanstate"
	"github.com/statedhq/stated/daemon"
)

func statsFromPB(st *pb.TaskCheckpointStats) *daemon.SnapshotStats {
	if st == nil {
		return nil
	}
	return &daemon.SnapshotStats{Unaligned: st.GetUnaligned(),
		Alignment:  time.Duration(st.GetAlignmentMicros()) * time.Microsecond,
		StartDelay: time.Duration(st.GetStartDelayMicros()) * time.Microsecond}
}

// chunksFromPB converts the chunks of one request.
func chunksFromPB(in []*pb.ChannelChunk) ([]daemon.ChannelChunk, error) {
	out := make([]daemon.ChannelChunk, 0, len(in))
	for i, c := range in {
		if c.GetChannel() == nil {
			return nil, fmt.Errorf("%w: chunk %d names no channel", backend.ErrInvalidArgument, i)
		}
		kind, err := protocol.ChannelKindFromPB(c.GetKind())
		if err != nil {
			return nil, fmt.Errorf("chunk %d: %w", i, err)
		}
		ch := daemon.ChannelChunk{Channel: protocol.ChannelFromPB(c.GetChannel()), Kind: kind,
			Buffers: make([][]chanstate.Record, len(c.GetBuffers()))}
		for j, b := range c.GetBuffers() {
			recs := make([]chanstate.Record, len(b.GetRecords()))
			for k, r := range b.GetRecords() {
				recs[k] = chanstate.Record{KeyGroup: r.GetKeyGroup(), Data: r.GetData()}
			}
			ch.Buffers[j] = recs
		}
		out = append(out, ch)
	}
	return out, nil
}

// WriteChannelState implements pb.StatedServer. The chunks of each request
// are appended as they arrive, so the daemon holds one request at a time.
func (s *Server) WriteChannelState(stream pb.Stated_WriteChannelStateServer) error {
	ctx := stream.Context()
	var inst *daemon.Instance
	var id uint64
	var job string
	var totals daemon.ChannelTotals
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		if inst == nil {
			inst, err = s.d.Lookup(req.GetInstanceId(), req.GetJob())
			if err != nil {
				return toStatus(err)
			}
			id, job = req.GetCheckpointId(), req.GetJob()
		} else if (len(req.GetInstanceId()) > 0 && string(req.GetInstanceId()) != string(inst.ID)) ||
			(req.GetJob() != "" && req.GetJob() != job) || (req.GetCheckpointId() != 0 && req.GetCheckpointId() != id) {
			return status.Errorf(codes.InvalidArgument, "stated: channel state of %s for checkpoint %d: a later request names another instance, job or checkpoint", inst.Task, id)
		}
		chunks, err := chunksFromPB(req.GetChunks())
		if err != nil {
			return toStatus(fmt.Errorf("api: channel state of %s for checkpoint %d: %w", inst.Task, id, err))
		}
		if totals, err = s.d.WriteChannelState(ctx, inst, id, chunks); err != nil {
			return toStatus(err)
		}
	}
	if inst == nil {
		return status.Error(codes.InvalidArgument, "stated: WriteChannelState: the stream sent no request (the first names the instance)")
	}
	return stream.SendAndClose(&pb.WriteChannelStateResponse{Channels: int32(totals.Channels), Buffers: totals.Buffers,
		Records: totals.Records, Bytes: totals.Bytes})
}

// ReadChannelState implements pb.StatedServer: the restored channel state,
// channel by channel, in responses kept under a quarter of the message
// limit (a buffer larger than that goes alone).
func (s *Server) ReadChannelState(req *pb.ReadChannelStateRequest, stream pb.Stated_ReadChannelStateServer) error {
	inst, err := s.d.Lookup(req.GetInstanceId(), req.GetJob())
	if err != nil {
		return toStatus(err)
	}
	rs := inst.RestoredChannels()
	if rs == nil {
		return nil
	}
	pk := protocol.NewChannelPacker(s.opts.MaxMessageSize/4, func(chunks []*pb.ChannelChunk) error {
		return stream.Send(&pb.ReadChannelStateResponse{Chunks: chunks})
	})
	for i, ch := range rs.Channels() {
		err := rs.Read(i, func(buf []chanstate.Record) error {
			b := &pb.ChannelBuffer{Records: make([]*pb.ChannelRecord, len(buf))}
			for k, r := range buf {
				b.Records[k] = &pb.ChannelRecord{KeyGroup: r.KeyGroup, Data: r.Data}
			}
			return pk.Add(ch.Channel, ch.Kind, b)
		})
		if err != nil {
			return toStatus(fmt.Errorf("api: read channel state of %s: %w", inst.Task, err))
		}
	}
	return pk.Flush()
}
