package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.stated.client.Daemon;
import java.util.List;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.typeutils.base.IntSerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.memory.MemoryManager;
import org.apache.flink.runtime.operators.testutils.MockEnvironment;
import org.apache.flink.runtime.operators.testutils.MockEnvironmentBuilder;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyedStateBackendParametersImpl;
import org.apache.flink.runtime.state.ttl.TtlTimeProvider;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The cache's size: from the operator's share of the slot's managed memory, reserved in the slot's
 * memory manager while the backend lives, unless the option sizes it.
 */
class CacheMemoryTest {
  private static final long MANAGED = 8L << 20;
  private static Daemon daemon;

  @BeforeAll
  static void startDaemon() throws Exception {
    daemon = new Daemon();
    daemon.start();
  }

  @AfterAll
  static void stopDaemon() throws Exception {
    if (daemon != null) {
      daemon.close();
    }
  }

  private static StatedStateBackend backend(MemorySize cacheSize) {
    Configuration c = new Configuration();
    c.set(StatedOptions.SOCKET, daemon.socket.toString());
    if (cacheSize != null) {
      c.set(StatedOptions.CACHE_SIZE, cacheSize);
    }
    return new StatedStateBackendFactory().createFromConfig(c, null);
  }

  private static StatedKeyedStateBackend<Integer> open(
      StatedStateBackend b, MockEnvironment env, double fraction) throws Exception {
    return (StatedKeyedStateBackend<Integer>)
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
                fraction));
  }

  private static void close(StatedKeyedStateBackend<Integer> k) throws Exception {
    k.dispose();
    k.close();
  }

  @Test
  void declaresManagedMemoryOnlyWhenTheOptionIsUnset() {
    assertThat(backend(null).useManagedMemory()).isTrue();
    assertThat(backend(MemorySize.ofMebiBytes(16)).useManagedMemory()).isFalse();
    assertThat(backend(MemorySize.ZERO).useManagedMemory()).isFalse();
  }

  @Test
  void takesTheOperatorsShareOfManagedMemoryAndGivesItBack() throws Exception {
    MockEnvironment env = new MockEnvironmentBuilder().setManagedMemorySize(MANAGED).build();
    MemoryManager mm = env.getMemoryManager();
    StatedStateBackend b = backend(null);
    StatedKeyedStateBackend<Integer> one = open(b, env, 0.5);
    assertThat(one.cache().capacity()).isEqualTo(MANAGED / 2);
    assertThat(one.cacheMemory().managed).isTrue();
    assertThat(mm.availableMemory()).isEqualTo(MANAGED / 2);
    StatedKeyedStateBackend<Integer> two = open(b, env, 0.25);
    assertThat(two.cache().capacity()).isEqualTo(MANAGED / 4);
    assertThat(mm.availableMemory()).isEqualTo(MANAGED / 4);
    // More than the slot has left: the task fails, saying what to do.
    assertThatThrownBy(() -> open(b, env, 0.5))
        .hasMessageContaining("managed memory")
        .hasMessageContaining(StatedOptions.CACHE_SIZE.key());
    assertThat(mm.availableMemory()).isEqualTo(MANAGED / 4);
    close(one);
    close(two);
    assertThat(mm.availableMemory()).isEqualTo(MANAGED);
    env.close();
  }

  @Test
  void theOptionSizesItWithoutManagedMemory() throws Exception {
    MockEnvironment env = new MockEnvironmentBuilder().setManagedMemorySize(MANAGED).build();
    StatedKeyedStateBackend<Integer> k = open(backend(new MemorySize(300 << 10)), env, 1.0);
    assertThat(k.cache().capacity()).isEqualTo(300 << 10);
    assertThat(k.cacheMemory().managed).isFalse();
    assertThat(env.getMemoryManager().availableMemory()).isEqualTo(MANAGED);
    close(k);
    env.close();
  }

  @Test
  void withoutManagedMemoryItFallsBack() throws Exception {
    MockEnvironment env = new MockEnvironmentBuilder().setManagedMemorySize(MANAGED).build();
    StatedKeyedStateBackend<Integer> k = open(backend(null), env, 0.0);
    assertThat(k.cache().capacity()).isEqualTo(CacheMemory.FALLBACK.getBytes());
    assertThat(k.cacheMemory().managed).isFalse();
    close(k);
    env.close();
  }

  @Test
  void theAsynchronousBackendHasNoCache() throws Exception {
    MockEnvironment env = new MockEnvironmentBuilder().setManagedMemorySize(MANAGED).build();
    StatedStateBackend b = backend(null);
    org.apache.flink.runtime.state.AsyncKeyedStateBackend<Integer> a =
        b.createAsyncKeyedStateBackend(
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
    assertThat(env.getMemoryManager().availableMemory()).isEqualTo(MANAGED);
    a.dispose();
    a.close();
    env.close();
  }
}
