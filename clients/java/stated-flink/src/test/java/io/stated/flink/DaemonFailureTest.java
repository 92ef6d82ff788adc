package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.stated.client.Daemon;
import io.stated.client.StatedException;
import java.util.List;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeutils.base.IntSerializer;
import org.apache.flink.api.common.typeutils.base.StringSerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.operators.testutils.MockEnvironment;
import org.apache.flink.runtime.operators.testutils.MockEnvironmentBuilder;
import org.apache.flink.runtime.state.CheckpointableKeyedStateBackend;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyedStateBackendParametersImpl;
import org.apache.flink.runtime.state.VoidNamespace;
import org.apache.flink.runtime.state.VoidNamespaceSerializer;
import org.apache.flink.runtime.state.ttl.TtlTimeProvider;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/** A daemon that dies under a running task fails the task's next state access, clearly. */
@Tag("daemon-views")
class DaemonFailureTest {
  @Test
  void aDaemonKilledUnderTheTask() throws Exception {
    try (Daemon daemon = new Daemon()) {
      daemon.start();
      Configuration c = new Configuration();
      c.set(StatedOptions.SOCKET, daemon.socket.toString());
      StatedStateBackend b = new StatedStateBackendFactory().createFromConfig(c, null);
      MockEnvironment env = new MockEnvironmentBuilder().build();
      CheckpointableKeyedStateBackend<Integer> kb =
          b.createKeyedStateBackend(
              new KeyedStateBackendParametersImpl<>(
                  env,
                  new JobID(),
                  "op",
                  IntSerializer.INSTANCE,
                  128,
                  KeyGroupRange.of(0, 127),
                  env.getTaskKvStateRegistry(),
                  TtlTimeProvider.DEFAULT,
                  new UnregisteredMetricsGroup(),
                  (name, value) -> {},
                  List.of(),
                  new CloseableRegistry(),
                  1.0));
      ValueState<String> v =
          kb.getPartitionedState(
              VoidNamespace.INSTANCE,
              VoidNamespaceSerializer.INSTANCE,
              new ValueStateDescriptor<>("v", StringSerializer.INSTANCE));
      kb.setCurrentKey(1);
      v.update("x");
      assertThat(v.value()).isEqualTo("x");
      daemon.kill();
      // The task gets an UNAVAILABLE naming the socket and how to start a
      // daemon; it never hangs. A read the cache answers does not meet the
      // stream, so the failure comes once the stream has seen the daemon's
      // end, or at the latest when a batch of writes goes out (at most 1000
      // operations) or a snapshot's barrier does. Batches go out without
      // waiting, so how many writes pass before the task learns of it
      // depends on the machine's load: the task keeps writing for up to 30
      // seconds, and a backend that never fails it fails the test.
      long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(30);
      assertThatThrownBy(
              () -> {
                for (int i = 0; System.nanoTime() < deadline; i++) {
                  kb.setCurrentKey(i);
                  v.update("y");
                  assertThat(v.value()).isEqualTo("y");
                }
              })
          .isInstanceOf(StatedException.class)
          .hasMessageContaining(daemon.socket.toString())
          .hasMessageContaining("stated serve")
          .satisfies(
              e ->
                  assertThat(((StatedException) e).code())
                      .isEqualTo(io.grpc.Status.Code.UNAVAILABLE));
      kb.dispose();
      env.close();
    }
  }
}
