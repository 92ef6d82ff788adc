package io.stated.flink;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.RunnableFuture;
import java.util.function.Function;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeutils.base.IntSerializer;
import org.apache.flink.api.common.typeutils.base.StringSerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.checkpoint.CheckpointOptions;
import org.apache.flink.runtime.operators.testutils.MockEnvironment;
import org.apache.flink.runtime.operators.testutils.MockEnvironmentBuilder;
import org.apache.flink.runtime.state.CheckpointableKeyedStateBackend;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyedStateBackendParametersImpl;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.SnapshotResult;
import org.apache.flink.runtime.state.StateBackend;
import org.apache.flink.runtime.state.StateBackendLoader;
import org.apache.flink.runtime.state.VoidNamespace;
import org.apache.flink.runtime.state.VoidNamespaceSerializer;
import org.apache.flink.runtime.state.memory.MemCheckpointStreamFactory;
import org.apache.flink.runtime.state.ttl.TtlTimeProvider;

/**
 * What {@link ShadedPluginIT} runs inside its class loader of Flink and the plugin jar: the backend
 * loaded as Flink loads it (by the factory named in {@code state.backend.type}), opened against the
 * daemon on the given socket, written, checkpointed, restored into a second backend and read. It
 * uses only Flink and the backend's public classes, never the client's dependencies, which in the
 * plugin jar live under io.stated.shaded.
 */
public final class ShadedPluginSmoke implements Function<String, String> {
  static final int KEYS = 100;

  @Override
  public String apply(String socket) {
    try {
      return run(socket);
    } catch (Exception e) {
      throw new RuntimeException("the plugin jar's backend failed: " + e, e);
    }
  }

  private String run(String socket) throws Exception {
    Configuration c = new Configuration();
    c.setString("state.backend.type", StatedStateBackendFactory.class.getName());
    c.setString("state.backend.stated.socket", socket);
    c.setString("state.backend.stated.kind", "lsm");
    StateBackend b =
        StateBackendLoader.loadStateBackendFromConfig(c, getClass().getClassLoader(), null);
    ValueStateDescriptor<String> desc = new ValueStateDescriptor<>("v", StringSerializer.INSTANCE);

    CheckpointableKeyedStateBackend<Integer> src = open(b, List.of());
    ValueState<String> v =
        src.getPartitionedState(VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, desc);
    for (int k = 0; k < KEYS; k++) {
      src.setCurrentKey(k);
      v.update("value-" + k);
    }
    RunnableFuture<SnapshotResult<KeyedStateHandle>> f =
        src.snapshot(
            1,
            0,
            new MemCheckpointStreamFactory(64 << 20),
            CheckpointOptions.forCheckpointWithDefaultLocation());
    f.run();
    KeyedStateHandle h = f.get().getJobManagerOwnedSnapshot();
    src.dispose();
    src.close();

    CheckpointableKeyedStateBackend<Integer> dst = open(b, List.of(h));
    ValueState<String> w =
        dst.getPartitionedState(VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, desc);
    List<String> got = new ArrayList<>();
    for (int k = 0; k < KEYS; k++) {
      dst.setCurrentKey(k);
      if (!("value-" + k).equals(w.value())) {
        got.add(k + "=" + w.value());
      }
    }
    String backend = dst.toString();
    dst.dispose();
    dst.close();
    return got.isEmpty() ? "restored " + KEYS + " keys in " + backend : "wrong values " + got;
  }

  private static CheckpointableKeyedStateBackend<Integer> open(
      StateBackend b, List<KeyedStateHandle> handles) throws Exception {
    MockEnvironment env = new MockEnvironmentBuilder().build();
    return b.createKeyedStateBackend(
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
            handles,
            new CloseableRegistry(),
            1.0));
  }
}
