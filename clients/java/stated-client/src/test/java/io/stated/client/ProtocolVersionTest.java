package io.stated.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import io.grpc.Server;
import io.grpc.ServerServiceDefinition;
import io.grpc.Status;
import io.grpc.netty.NettyServerBuilder;
import io.grpc.stub.ServerCalls;
import io.stated.api.v1.CloseRequest;
import io.stated.api.v1.CloseResponse;
import io.stated.api.v1.OpenRequest;
import io.stated.api.v1.OpenResponse;
import io.stated.api.v1.TaskId;
import java.net.InetSocketAddress;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.Test;

/**
 * Open against servers that are not a daemon of this client's protocol: one that advertises an
 * older revision (a fake serving Open and CloseInstance only) and one that serves no stated.v1 at
 * all. Each fails with a message that names the problem, and the first instance is closed again.
 */
class ProtocolVersionTest {
  private static final OpenRequest REQ =
      OpenRequest.newBuilder()
          .setTask(TaskId.newBuilder().setJob("j").setOperator("op").setSubtask(0))
          .build();

  /** A server with the given service (null: none) on a loopback port, and a client of it. */
  private static <T> T withServer(ServerServiceDefinition service, Check<T> check)
      throws Exception {
    NettyServerBuilder sb = NettyServerBuilder.forAddress(new InetSocketAddress("127.0.0.1", 0));
    if (service != null) {
      sb.addService(service);
    }
    Server server = sb.build().start();
    try (StatedClient c = StatedClient.tcp("127.0.0.1", server.getPort()).build()) {
      return check.run(c);
    } finally {
      server.shutdownNow().awaitTermination();
    }
  }

  interface Check<T> {
    T run(StatedClient c) throws Exception;
  }

  private static ServerServiceDefinition daemonOfRevision(int revision, List<ByteString> closed) {
    return ServerServiceDefinition.builder(StatedGrpc.SERVICE.getFullName())
        .addMethod(
            StatedGrpc.OPEN,
            ServerCalls.asyncUnaryCall(
                (OpenRequest req, io.grpc.stub.StreamObserver<OpenResponse> out) -> {
                  out.onNext(
                      OpenResponse.newBuilder()
                          .setInstanceId(ByteString.copyFromUtf8("inst-1"))
                          .setMaxParallelism(128)
                          .setProtocolVersion(revision)
                          .build());
                  out.onCompleted();
                }))
        .addMethod(
            StatedGrpc.CLOSE_INSTANCE,
            ServerCalls.asyncUnaryCall(
                (CloseRequest req, io.grpc.stub.StreamObserver<CloseResponse> out) -> {
                  closed.add(req.getInstanceId());
                  out.onNext(CloseResponse.getDefaultInstance());
                  out.onCompleted();
                }))
        .build();
  }

  @Test
  void olderRevisionFailsOpenAndClosesTheInstance() throws Exception {
    List<ByteString> closed = new CopyOnWriteArrayList<>();
    StatedException e =
        withServer(
            daemonOfRevision(0, closed),
            c -> assertThrows(StatedException.class, () -> StatedException.await(c.open(REQ))));
    assertEquals(Status.Code.FAILED_PRECONDITION, e.code(), e.getMessage());
    assertTrue(
        e.getMessage().contains("speaks protocol revision 0")
            && e.getMessage()
                .contains("needs revision " + StatedClient.MIN_PROTOCOL_VERSION + " or later")
            && e.getMessage().contains("upgrade the daemon"),
        e.getMessage());
    assertEquals(List.of(ByteString.copyFromUtf8("inst-1")), closed);
  }

  @Test
  void externalOpenNeedsRevisionThree() throws Exception {
    List<ByteString> closed = new CopyOnWriteArrayList<>();
    StatedException e =
        withServer(
            daemonOfRevision(2, closed),
            // Revision 2 serves every other Open, and external ones without abandon.
            c ->
                assertThrows(
                    StatedException.class,
                    () -> StatedException.await(c.openExternal(REQ, "ckpts/j", List.of()))));
    assertEquals(Status.Code.FAILED_PRECONDITION, e.code(), e.getMessage());
    assertTrue(
        e.getMessage().contains("speaks protocol revision 2")
            && e.getMessage()
                .contains("needs revision " + StatedClient.EXTERNAL_PROTOCOL_VERSION + " or later")
            && e.getMessage().contains("externally owned"),
        e.getMessage());
    assertEquals(List.of(ByteString.copyFromUtf8("inst-1")), closed);
  }

  @Test
  void noStatedV1FailsOpenNamingTheProtocol() throws Exception {
    StatedException e =
        withServer(
            null,
            c -> assertThrows(StatedException.class, () -> StatedException.await(c.open(REQ))));
    assertEquals(Status.Code.UNIMPLEMENTED, e.code(), e.getMessage());
    assertTrue(
        e.getMessage().contains("does not implement stated.v1's Open")
            && e.getMessage().contains("another major protocol version"),
        e.getMessage());
  }
}
