package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

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
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The cache's size: from the operator's share of the slot's managed memory, reserved in the slot's
 * memory manager while the backend lives, unless the option sizes it.
 */
class CacheMemoryTest {
  private static final long MANAGED = 8L << 20;
  @RegisterExtension static final TestDaemon DAEMON = TestDaemon.plain();

  private static StatedStateBackend backend(MemorySize cacheSize) {
    Configuration c = new Configuration();
    c.set(StatedOptions.SOCKET, DAEMON.socket());
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

  /** Puts 20,000 values of 1 KiB (keys of round {@code round}) into the backend's cache. */
  private static void fill(StatedKeyedStateBackend<Integer> k, int round) {
    k.cache().markComplete("v");
    for (int i = 0; i < 20_000; i++) {
      k.cache()
          .put(
              "v",
              new byte[] {(byte) round, (byte) i, (byte) (i >> 8)},
              new byte[] {0},
              new StateCache.ValueNode(new byte[1024]));
    }
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

  /**
   * Flink gives every keyed operator of a slot the slot's whole share (the state backend's use case
   * is slot-scoped), as it does for RocksDB, whose instances in a slot share one cache: two keyed
   * backends in one slot both open, share one reservation, each holds at most half of it, one left
   * alone may grow to all of it, and the reservation goes when the last one closes.
   */
  @Test
  void theKeyedBackendsOfASlotShareItsManagedMemory() throws Exception {
    MockEnvironment env = new MockEnvironmentBuilder().setManagedMemorySize(MANAGED).build();
    MemoryManager mm = env.getMemoryManager();
    StatedStateBackend b = backend(null);
    StatedKeyedStateBackend<Integer> one = open(b, env, 1.0);
    assertThat(one.cache().capacity()).isEqualTo(MANAGED);
    assertThat(one.cacheMemory().managed).isTrue();
    assertThat(mm.availableMemory()).isZero();
    StatedKeyedStateBackend<Integer> two = open(b, env, 1.0);
    assertThat(two.cacheMemory().budget).isSameAs(one.cacheMemory().budget);
    assertThat(mm.availableMemory()).isZero();
    // Both fill their caches: each stays within half of the slot's share.
    fill(one, 0);
    fill(two, 0);
    fill(one, 1);
    for (StatedKeyedStateBackend<Integer> k : List.of(one, two)) {
      assertThat(k.cache().bytes()).isPositive().isLessThanOrEqualTo(MANAGED / 2);
    }
    close(one);
    assertThat(mm.availableMemory()).as("the other backend still holds the slot's share").isZero();
    // Alone on the budget, the other grows past its former half.
    fill(two, 2);
    assertThat(two.cache().bytes()).isGreaterThan(MANAGED / 2).isLessThanOrEqualTo(MANAGED);
    close(two);
    assertThat(mm.availableMemory()).isEqualTo(MANAGED);
    env.close();
  }

  @Test
  void aSlotWhoseManagedMemoryIsTakenFailsTheTaskSayingWhatToDo() throws Exception {
    MockEnvironment env = new MockEnvironmentBuilder().setManagedMemorySize(MANAGED).build();
    MemoryManager mm = env.getMemoryManager();
    Object other = new Object();
    mm.reserveMemory(other, MANAGED);
    assertThatThrownBy(() -> open(backend(null), env, 1.0))
        .hasMessageContaining("managed memory")
        .hasMessageContaining(StatedOptions.CACHE_SIZE.key());
    mm.releaseMemory(other, MANAGED);
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
