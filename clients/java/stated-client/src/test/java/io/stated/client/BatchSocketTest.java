package io.stated.client;

import static org.junit.jupiter.api.Assertions.assertEquals;

import io.stated.api.v1.BackendKind;
import io.stated.api.v1.OpType;
import io.stated.api.v1.Result;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;

/**
 * When the batch stream does not go on the batch socket: a daemon started without one, and one
 * whose batch socket cannot be reached (the file is gone, as when the client sees another mount of
 * the socket's directory). Both fall back to the Batch call and work.
 */
class BatchSocketTest {
  @Test
  void aDaemonWithoutABatchSocketNamesNone() throws Exception {
    try (Daemon d = new Daemon("--batch-socket", "off")) {
      d.start();
      try (StatedClient c = d.client()) {
        Instance inst = open(c, "off");
        assertEquals("", inst.openResponse().getBatchSocket());
        assertEquals("grpc", inst.transport());
        roundTrip(inst);
      }
    }
  }

  @Test
  void aBatchSocketThatCannotBeReachedFallsBackToGrpc() throws Exception {
    try (Daemon d = new Daemon()) {
      d.start();
      try (StatedClient c = d.client()) {
        Instance first = open(c, "reached");
        Path sock = Path.of(first.openResponse().getBatchSocket());
        assertEquals("batch-socket", first.transport());
        roundTrip(first);
        Files.delete(sock);
        Instance inst = open(c, "gone");
        assertEquals(sock.toString(), inst.openResponse().getBatchSocket());
        assertEquals("grpc", inst.transport());
        roundTrip(inst);
        // The stream already on the socket is not affected by its file's removal.
        roundTrip(first);
      }
    }
  }

  private static Instance open(StatedClient c, String job) {
    return StatedException.await(
        c.open(ConformanceTest.spec(job, BackendKind.BACKEND_KIND_HEAP).build()));
  }

  private static void roundTrip(Instance inst) {
    StatedException.await(inst.send(ConformanceTest.putOps(inst, 0, 3, "x"))).check();
    CompletableFuture<Result> got =
        inst.submit(inst.op(OpType.OP_TYPE_GET, "v", ConformanceTest.k("k2")).build());
    inst.flush();
    assertEquals("x", StatedException.await(got).getValue().toStringUtf8());
  }
}
