// The node-to-node gRPC service, and the client the CLI dials it with.

package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/statedhq/stated/cluster/clusterpb"
	"github.com/statedhq/stated/internal/tlsconf"
)

// service is the node-to-node gRPC service.
type service struct {
	pb.UnimplementedClusterServer
	n *Member
}

func (s *service) Apply(ctx context.Context, req *pb.ApplyRequest) (*pb.ApplyResponse, error) {
	if s.n.raft.State() != raft.Leader {
		return nil, status.Errorf(codes.FailedPrecondition, "%s is not the leader", s.n.opts.ID)
	}
	if _, err := decodeCommand(req.GetCommand()); err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	res, err := s.n.readLocal(ctx, req.GetCommand())
	if err != nil {
		if retryable(err) {
			return nil, status.Errorf(codes.FailedPrecondition, "%s: %v", s.n.opts.ID, err)
		}
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &pb.ApplyResponse{Result: res}, nil
}

func (s *service) Call(ctx context.Context, req *pb.CallRequest) (*pb.CallResponse, error) {
	if s.n.raft.State() != raft.Leader {
		return nil, status.Errorf(codes.FailedPrecondition, "%s is not the leader", s.n.opts.ID)
	}
	out, err := s.n.callLocal(ctx, req.GetMethod(), req.GetPayload())
	switch {
	case errors.Is(err, errNotReady):
		return nil, status.Errorf(codes.Unavailable, "%s: %v", s.n.opts.ID, err)
	case retryable(err):
		return nil, status.Errorf(codes.FailedPrecondition, "%s: %v", s.n.opts.ID, err)
	case err != nil:
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return &pb.CallResponse{Payload: out}, nil
}

// Join forwards to the leader when this node does not lead, so that an
// operator may ask any member.
func (s *service) Join(ctx context.Context, req *pb.JoinRequest) (*pb.JoinResponse, error) {
	if err := s.n.Join(ctx, req.GetNodeId(), req.GetRaftAddr()); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &pb.JoinResponse{}, nil
}

// Leave forwards to the leader when this node does not lead, so that an
// operator may ask any member.
func (s *service) Leave(ctx context.Context, req *pb.LeaveRequest) (*pb.LeaveResponse, error) {
	if err := s.n.Leave(ctx, req.GetNodeId()); err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	return &pb.LeaveResponse{}, nil
}

func (s *service) Status(ctx context.Context, req *pb.StatusRequest) (*pb.StatusResponse, error) {
	r, err := s.n.Status(ctx, req.GetProbe())
	if err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	return r, nil
}

// Client is a connection to one node's service, for the CLI (stated
// cluster status, join, leave).
type Client struct {
	pb.ClusterClient
	cc *grpc.ClientConn
}

// Dial connects to the node at addr (its --raft-addr) with the cluster's
// credentials: TLS files (a client certificate the nodes accept) and/or
// the cluster token.
func Dial(addr string, t TLS, token string) (*Client, error) {
	var cfg *tls.Config
	if t.set() {
		var err error
		if cfg, err = tlsconf.ClientConfig(tlsconf.Client{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile}); err != nil {
			return nil, fmt.Errorf("cluster: %w", err)
		}
	}
	cc, err := dialRPC(addr, nil, cfg, token)
	if err != nil {
		return nil, err
	}
	return &Client{ClusterClient: pb.NewClusterClient(cc), cc: cc}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.cc.Close() }
