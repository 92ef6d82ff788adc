package io.stated.client;

import com.google.protobuf.ByteString;
import io.stated.api.v1.BackendKind;
import io.stated.api.v1.KeyHash;
import io.stated.api.v1.OpType;
import io.stated.api.v1.OpenRequest;
import io.stated.api.v1.Result;
import io.stated.api.v1.StateDescriptor;
import io.stated.api.v1.StateKind;
import io.stated.api.v1.TaskId;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;

/**
 * A benchmark, not a test: batched puts then gets of 100-byte values through {@link
 * Instance#submit} (requests cut at 1000 operations, 8 in flight), then the same number of
 * synchronous gets (one round trip each), against a daemon it starts from the repository.
 *
 * <pre>
 * cd clients/java &amp;&amp; mvn -q -pl stated-client test-compile dependency:build-classpath \
 *     -Dmdep.outputFile=/tmp/cp.txt &amp;&amp; java -cp stated-client/target/test-classes:\
 * stated-client/target/classes:$(cat /tmp/cp.txt) -Dstated.repo=../.. io.stated.client.ClientBench 200000
 * </pre>
 *
 * <p>{@code -Dstated.batchSocket=false} keeps the batch stream on gRPC instead of the daemon's
 * batch socket, to compare the two.
 */
public final class ClientBench {
  private ClientBench() {}

  public static void main(String[] args) throws Exception {
    int n = args.length > 0 ? Integer.parseInt(args[0]) : 200_000;
    try (Daemon d = new Daemon()) {
      d.start();
      boolean batchSocket = Boolean.parseBoolean(System.getProperty("stated.batchSocket", "true"));
      try (StatedClient c = d.client(batchSocket)) {
        Instance inst =
            StatedException.await(
                c.open(
                    OpenRequest.newBuilder()
                        .setTask(TaskId.newBuilder().setJob("bench").setOperator("op"))
                        .setParallelism(1)
                        .setBackendKind(BackendKind.BACKEND_KIND_FILE)
                        .setKeyHash(KeyHash.KEY_HASH_FNV1A_MURMUR)
                        .addStates(
                            StateDescriptor.newBuilder()
                                .setName("v")
                                .setKind(StateKind.STATE_KIND_VALUE))
                        .build()));
        ByteString value = ByteString.copyFrom(new byte[100]);
        byte[][] keys = new byte[n][];
        for (int i = 0; i < n; i++) {
          keys[i] = ("key-" + i).getBytes(StandardCharsets.UTF_8);
        }
        for (int round = 0; round < 2; round++) {
          long t0 = System.nanoTime();
          CompletableFuture<Result> last = null;
          for (int i = 0; i < n; i++) {
            last = inst.submit(inst.op(OpType.OP_TYPE_PUT, "v", keys[i]).setValue(value).build());
          }
          inst.flush();
          StatedException.await(last);
          double puts = n / ((System.nanoTime() - t0) / 1e9);
          t0 = System.nanoTime();
          List<CompletableFuture<Result>> gets = new ArrayList<>(n);
          for (int i = 0; i < n; i++) {
            gets.add(inst.submit(inst.op(OpType.OP_TYPE_GET, "v", keys[i]).build()));
          }
          inst.flush();
          for (CompletableFuture<Result> f : gets) {
            if (!StatedException.await(f).getFound()) {
              throw new IllegalStateException("a key written was not found");
            }
          }
          double getsPerSec = n / ((System.nanoTime() - t0) / 1e9);
          int sync = Math.min(n, 20_000);
          t0 = System.nanoTime();
          for (int i = 0; i < sync; i++) {
            CompletableFuture<Result> f =
                inst.submit(inst.op(OpType.OP_TYPE_GET, "v", keys[i]).build());
            inst.flush();
            StatedException.await(f);
          }
          double syncPerSec = sync / ((System.nanoTime() - t0) / 1e9);
          System.out.printf(
              "round %d (%s): %d keys, 100-byte values: pipelined put %.0fk ops/s, pipelined get"
                  + " %.0fk ops/s, synchronous get %.1fk ops/s (%d)%n",
              round, inst.transport(), n, puts / 1000, getsPerSec / 1000, syncPerSec / 1000, sync);
        }
        StatedException.await(inst.closeInstance());
      }
    }
  }
}
