package io.stated.flink;

import java.util.Collection;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.typeutils.base.IntSerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.operators.testutils.MockEnvironment;
import org.apache.flink.runtime.operators.testutils.MockEnvironmentBuilder;
import org.apache.flink.runtime.state.CheckpointableKeyedStateBackend;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyedStateBackendParametersImpl;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.ttl.TtlTimeProvider;

/** Keyed backends of stated's factory as Flink's task builds them, for tests. */
final class KeyedBackends {
  private KeyedBackends() {}

  /**
   * A backend of the stated factory configured by {@code conf}, for integer keys, holding all
   * {@code maxParallelism} key groups, restored from {@code restored} (empty: fresh).
   */
  static CheckpointableKeyedStateBackend<Integer> open(
      Configuration conf, int maxParallelism, Collection<KeyedStateHandle> restored)
      throws Exception {
    MockEnvironment env = new MockEnvironmentBuilder().build();
    return new StatedStateBackendFactory()
        .createFromConfig(conf, null)
        .createKeyedStateBackend(
            new KeyedStateBackendParametersImpl<>(
                env,
                new JobID(),
                "op",
                IntSerializer.INSTANCE,
                maxParallelism,
                KeyGroupRange.of(0, maxParallelism - 1),
                env.getTaskKvStateRegistry(),
                TtlTimeProvider.DEFAULT,
                new UnregisteredMetricsGroup(),
                (name, value) -> {},
                restored,
                new CloseableRegistry(),
                1.0));
  }
}
