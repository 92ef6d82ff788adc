package io.stated.client;

import com.google.protobuf.Descriptors;
import com.google.protobuf.Message;
import io.grpc.MethodDescriptor;
import io.grpc.MethodDescriptor.MethodType;
import io.grpc.protobuf.ProtoUtils;
import io.stated.api.v1.AbortCheckpointRequest;
import io.stated.api.v1.AbortCheckpointResponse;
import io.stated.api.v1.AwaitSnapshotRequest;
import io.stated.api.v1.AwaitSnapshotResponse;
import io.stated.api.v1.BatchRequest;
import io.stated.api.v1.BatchResponse;
import io.stated.api.v1.CloseRequest;
import io.stated.api.v1.CloseResponse;
import io.stated.api.v1.CompleteCheckpointRequest;
import io.stated.api.v1.CompleteCheckpointResponse;
import io.stated.api.v1.ConfirmSnapshotRequest;
import io.stated.api.v1.ConfirmSnapshotResponse;
import io.stated.api.v1.CountEntriesRequest;
import io.stated.api.v1.CountEntriesResponse;
import io.stated.api.v1.ForgetSnapshotRequest;
import io.stated.api.v1.ForgetSnapshotResponse;
import io.stated.api.v1.ListCheckpointsRequest;
import io.stated.api.v1.ListCheckpointsResponse;
import io.stated.api.v1.LoadRequest;
import io.stated.api.v1.LoadResponse;
import io.stated.api.v1.OpenRequest;
import io.stated.api.v1.OpenResponse;
import io.stated.api.v1.PlanRescaleRequest;
import io.stated.api.v1.PlanRescaleResponse;
import io.stated.api.v1.ReadChannelStateRequest;
import io.stated.api.v1.ReadChannelStateResponse;
import io.stated.api.v1.RegisterStatesRequest;
import io.stated.api.v1.RegisterStatesResponse;
import io.stated.api.v1.ReleaseViewRequest;
import io.stated.api.v1.ReleaseViewResponse;
import io.stated.api.v1.ScanKeysRequest;
import io.stated.api.v1.ScanKeysResponse;
import io.stated.api.v1.ScanViewRequest;
import io.stated.api.v1.ScanViewResponse;
import io.stated.api.v1.SnapshotRequest;
import io.stated.api.v1.SnapshotResponse;
import io.stated.api.v1.StatedProto;
import io.stated.api.v1.TriggerSavepointRequest;
import io.stated.api.v1.TriggerSavepointResponse;
import io.stated.api.v1.WriteChannelStateRequest;
import io.stated.api.v1.WriteChannelStateResponse;

/**
 * The gRPC method descriptors of the {@code stated.v1.Stated} service.
 *
 * <p>grpc-java's code generator (protoc-gen-grpc-java) is not served as a Maven artifact here, so
 * the descriptors are made from the proto's own service descriptor, which protoc compiled into
 * {@link StatedProto}: each one is checked against it (name, request and response type, streaming)
 * when this class loads, so a proto that changed under the client fails at once, not on the wire.
 */
final class StatedGrpc {
  private StatedGrpc() {}

  static final Descriptors.ServiceDescriptor SERVICE =
      StatedProto.getDescriptor().findServiceByName("Stated");

  static final MethodDescriptor<OpenRequest, OpenResponse> OPEN =
      method(
          "Open",
          MethodType.UNARY,
          OpenRequest.getDefaultInstance(),
          OpenResponse.getDefaultInstance());
  static final MethodDescriptor<BatchRequest, BatchResponse> BATCH =
      method(
          "Batch",
          MethodType.BIDI_STREAMING,
          BatchRequest.getDefaultInstance(),
          BatchResponse.getDefaultInstance());
  static final MethodDescriptor<SnapshotRequest, SnapshotResponse> SNAPSHOT =
      method(
          "Snapshot",
          MethodType.UNARY,
          SnapshotRequest.getDefaultInstance(),
          SnapshotResponse.getDefaultInstance());
  static final MethodDescriptor<CompleteCheckpointRequest, CompleteCheckpointResponse>
      COMPLETE_CHECKPOINT =
          method(
              "CompleteCheckpoint",
              MethodType.UNARY,
              CompleteCheckpointRequest.getDefaultInstance(),
              CompleteCheckpointResponse.getDefaultInstance());
  static final MethodDescriptor<AbortCheckpointRequest, AbortCheckpointResponse> ABORT_CHECKPOINT =
      method(
          "AbortCheckpoint",
          MethodType.UNARY,
          AbortCheckpointRequest.getDefaultInstance(),
          AbortCheckpointResponse.getDefaultInstance());
  static final MethodDescriptor<ListCheckpointsRequest, ListCheckpointsResponse> LIST_CHECKPOINTS =
      method(
          "ListCheckpoints",
          MethodType.UNARY,
          ListCheckpointsRequest.getDefaultInstance(),
          ListCheckpointsResponse.getDefaultInstance());
  static final MethodDescriptor<TriggerSavepointRequest, TriggerSavepointResponse>
      TRIGGER_SAVEPOINT =
          method(
              "TriggerSavepoint",
              MethodType.UNARY,
              TriggerSavepointRequest.getDefaultInstance(),
              TriggerSavepointResponse.getDefaultInstance());
  static final MethodDescriptor<PlanRescaleRequest, PlanRescaleResponse> PLAN_RESCALE =
      method(
          "PlanRescale",
          MethodType.UNARY,
          PlanRescaleRequest.getDefaultInstance(),
          PlanRescaleResponse.getDefaultInstance());
  static final MethodDescriptor<CloseRequest, CloseResponse> CLOSE_INSTANCE =
      method(
          "CloseInstance",
          MethodType.UNARY,
          CloseRequest.getDefaultInstance(),
          CloseResponse.getDefaultInstance());
  static final MethodDescriptor<WriteChannelStateRequest, WriteChannelStateResponse>
      WRITE_CHANNEL_STATE =
          method(
              "WriteChannelState",
              MethodType.CLIENT_STREAMING,
              WriteChannelStateRequest.getDefaultInstance(),
              WriteChannelStateResponse.getDefaultInstance());
  static final MethodDescriptor<ReadChannelStateRequest, ReadChannelStateResponse>
      READ_CHANNEL_STATE =
          method(
              "ReadChannelState",
              MethodType.SERVER_STREAMING,
              ReadChannelStateRequest.getDefaultInstance(),
              ReadChannelStateResponse.getDefaultInstance());

  static final MethodDescriptor<ScanViewRequest, ScanViewResponse> SCAN_VIEW =
      method(
          "ScanView",
          MethodType.SERVER_STREAMING,
          ScanViewRequest.getDefaultInstance(),
          ScanViewResponse.getDefaultInstance());
  static final MethodDescriptor<ReleaseViewRequest, ReleaseViewResponse> RELEASE_VIEW =
      method(
          "ReleaseView",
          MethodType.UNARY,
          ReleaseViewRequest.getDefaultInstance(),
          ReleaseViewResponse.getDefaultInstance());
  static final MethodDescriptor<ScanKeysRequest, ScanKeysResponse> SCAN_KEYS =
      method(
          "ScanKeys",
          MethodType.UNARY,
          ScanKeysRequest.getDefaultInstance(),
          ScanKeysResponse.getDefaultInstance());
  static final MethodDescriptor<CountEntriesRequest, CountEntriesResponse> COUNT_ENTRIES =
      method(
          "CountEntries",
          MethodType.UNARY,
          CountEntriesRequest.getDefaultInstance(),
          CountEntriesResponse.getDefaultInstance());
  static final MethodDescriptor<RegisterStatesRequest, RegisterStatesResponse> REGISTER_STATES =
      method(
          "RegisterStates",
          MethodType.UNARY,
          RegisterStatesRequest.getDefaultInstance(),
          RegisterStatesResponse.getDefaultInstance());
  static final MethodDescriptor<LoadRequest, LoadResponse> LOAD =
      method(
          "Load",
          MethodType.CLIENT_STREAMING,
          LoadRequest.getDefaultInstance(),
          LoadResponse.getDefaultInstance());

  // The externally owned mode (revision 2).
  static final MethodDescriptor<AwaitSnapshotRequest, AwaitSnapshotResponse> AWAIT_SNAPSHOT =
      method(
          "AwaitSnapshot",
          MethodType.UNARY,
          AwaitSnapshotRequest.getDefaultInstance(),
          AwaitSnapshotResponse.getDefaultInstance());
  static final MethodDescriptor<ConfirmSnapshotRequest, ConfirmSnapshotResponse> CONFIRM_SNAPSHOT =
      method(
          "ConfirmSnapshot",
          MethodType.UNARY,
          ConfirmSnapshotRequest.getDefaultInstance(),
          ConfirmSnapshotResponse.getDefaultInstance());
  static final MethodDescriptor<ForgetSnapshotRequest, ForgetSnapshotResponse> FORGET_SNAPSHOT =
      method(
          "ForgetSnapshot",
          MethodType.UNARY,
          ForgetSnapshotRequest.getDefaultInstance(),
          ForgetSnapshotResponse.getDefaultInstance());

  private static <Q extends Message, R extends Message> MethodDescriptor<Q, R> method(
      String name, MethodType type, Q request, R response) {
    Descriptors.MethodDescriptor m = SERVICE.findMethodByName(name);
    if (m == null) {
      throw new IllegalStateException("stated.proto has no method Stated." + name);
    }
    if (!m.getInputType().equals(request.getDescriptorForType())
        || !m.getOutputType().equals(response.getDescriptorForType())) {
      throw new IllegalStateException(
          "stated.proto's Stated."
              + name
              + " takes "
              + m.getInputType().getFullName()
              + " and returns "
              + m.getOutputType().getFullName()
              + ", not what the client was written for");
    }
    MethodType actual =
        m.isClientStreaming()
            ? (m.isServerStreaming() ? MethodType.BIDI_STREAMING : MethodType.CLIENT_STREAMING)
            : (m.isServerStreaming() ? MethodType.SERVER_STREAMING : MethodType.UNARY);
    if (actual != type) {
      throw new IllegalStateException(
          "stated.proto's Stated." + name + " is " + actual + ", the client expects " + type);
    }
    return MethodDescriptor.<Q, R>newBuilder()
        .setType(type)
        .setFullMethodName(MethodDescriptor.generateFullMethodName(SERVICE.getFullName(), name))
        .setRequestMarshaller(ProtoUtils.marshaller(request))
        .setResponseMarshaller(ProtoUtils.marshaller(response))
        .build();
  }
}
