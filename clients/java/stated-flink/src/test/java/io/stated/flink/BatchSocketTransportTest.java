package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.List;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeutils.base.StringSerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.runtime.state.CheckpointableKeyedStateBackend;
import org.apache.flink.runtime.state.VoidNamespace;
import org.apache.flink.runtime.state.VoidNamespaceSerializer;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

/**
 * A keyed backend on a Unix socket sends its batch stream on the daemon's batch socket unless
 * {@link StatedOptions#BATCH_SOCKET} is false: a silent fall back to gRPC would pass every other
 * test and cost a third more per round trip.
 */
class BatchSocketTransportTest {
  @RegisterExtension static final TestDaemon DAEMON = TestDaemon.plain();

  @ParameterizedTest
  @CsvSource({"true, batch-socket", "false, grpc"})
  void theOptionPicksTheTransport(boolean batchSocket, String transport) throws Exception {
    Configuration c = new Configuration();
    c.set(StatedOptions.SOCKET, DAEMON.socket());
    c.set(StatedOptions.BATCH_SOCKET, batchSocket);
    // A cache of a few entries: most reads below are round trips on the transport.
    c.set(StatedOptions.CACHE_SIZE, MemorySize.parse("4k"));
    CheckpointableKeyedStateBackend<Integer> b = KeyedBackends.open(c, 128, List.of());
    try {
      assertThat(((StatedKeyedStateBackend<?>) b).instance().transport()).isEqualTo(transport);
      ValueState<String> v =
          b.getPartitionedState(
              VoidNamespace.INSTANCE,
              VoidNamespaceSerializer.INSTANCE,
              new ValueStateDescriptor<>("v", StringSerializer.INSTANCE));
      for (int k = 0; k < 100; k++) {
        b.setCurrentKey(k);
        v.update("x" + k);
      }
      long before = ((StatedKeyedStateBackend<?>) b).daemon().roundTrips();
      for (int k = 0; k < 100; k++) {
        b.setCurrentKey(k);
        assertThat(v.value()).isEqualTo("x" + k);
      }
      assertThat(((StatedKeyedStateBackend<?>) b).daemon().roundTrips() - before)
          .as("reads that went to the daemon")
          .isGreaterThan(50);
    } finally {
      b.dispose();
    }
  }
}
