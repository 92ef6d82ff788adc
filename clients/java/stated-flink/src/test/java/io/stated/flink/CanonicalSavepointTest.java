package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.RunnableFuture;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeutils.base.IntSerializer;
import org.apache.flink.api.common.typeutils.base.LongSerializer;
import org.apache.flink.api.common.typeutils.base.StringSerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.checkpoint.CheckpointOptions;
import org.apache.flink.runtime.checkpoint.SavepointType;
import org.apache.flink.runtime.operators.testutils.MockEnvironment;
import org.apache.flink.runtime.operators.testutils.MockEnvironmentBuilder;
import org.apache.flink.runtime.state.CheckpointStorageLocationReference;
import org.apache.flink.runtime.state.CheckpointableKeyedStateBackend;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.runtime.state.KeyGroupedInternalPriorityQueue;
import org.apache.flink.runtime.state.KeyGroupsSavepointStateHandle;
import org.apache.flink.runtime.state.KeyedStateBackendParametersImpl;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.SnapshotResult;
import org.apache.flink.runtime.state.StateBackend;
import org.apache.flink.runtime.state.VoidNamespace;
import org.apache.flink.runtime.state.VoidNamespaceSerializer;
import org.apache.flink.runtime.state.hashmap.HashMapStateBackend;
import org.apache.flink.runtime.state.memory.MemCheckpointStreamFactory;
import org.apache.flink.runtime.state.ttl.TtlTimeProvider;
import org.apache.flink.streaming.api.operators.TimerHeapInternalTimer;
import org.apache.flink.streaming.api.operators.TimerSerializer;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Canonical savepoints move between stated and Flink's own HashMap backend both ways, and a stated
 * savepoint restores rescaled (two subtasks, then one), with value, list and map state (a null map
 * value included); timers a HashMap savepoint holds as priority-queue states restore into stated's
 * heap queues.
 */
@Tag("daemon-views")
class CanonicalSavepointTest {
  private static final int KEYS = 300;
  private static final int MAX = 128;
  @RegisterExtension static final TestDaemon DAEMON = TestDaemon.plain();
  private final JobID job = new JobID();

  private final ValueStateDescriptor<String> valueDesc =
      new ValueStateDescriptor<>("v", StringSerializer.INSTANCE);
  private final ListStateDescriptor<Long> listDesc =
      new ListStateDescriptor<>("l", LongSerializer.INSTANCE);
  private final MapStateDescriptor<String, Integer> mapDesc =
      new MapStateDescriptor<>("m", StringSerializer.INSTANCE, IntSerializer.INSTANCE);

  private static StateBackend stated() {
    Configuration c = new Configuration();
    c.set(StatedOptions.SOCKET, DAEMON.socket());
    c.set(StatedOptions.BACKEND_KIND, "lsm");
    return new StatedStateBackendFactory().createFromConfig(c, null);
  }

  private CheckpointableKeyedStateBackend<Integer> open(
      StateBackend b, KeyGroupRange range, Collection<KeyedStateHandle> handles) throws Exception {
    return open(b, range, handles, new CloseableRegistry());
  }

  private CheckpointableKeyedStateBackend<Integer> open(
      StateBackend b,
      KeyGroupRange range,
      Collection<KeyedStateHandle> handles,
      CloseableRegistry restoreRegistry)
      throws Exception {
    MockEnvironment env = new MockEnvironmentBuilder().build();
    return b.createKeyedStateBackend(
        new KeyedStateBackendParametersImpl<>(
            env,
            job,
            "op",
            IntSerializer.INSTANCE,
            MAX,
            range,
            env.getTaskKvStateRegistry(),
            TtlTimeProvider.DEFAULT,
            new UnregisteredMetricsGroup(),
            (name, value) -> {},
            handles,
            restoreRegistry,
            1.0));
  }

  private void write(CheckpointableKeyedStateBackend<Integer> b, boolean nullValue)
      throws Exception {
    ValueState<String> v =
        b.getPartitionedState(VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, valueDesc);
    ListState<Long> l =
        b.getPartitionedState(VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, listDesc);
    MapState<String, Integer> m =
        b.getPartitionedState(VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, mapDesc);
    for (int k = 0; k < KEYS; k++) {
      b.setCurrentKey(k);
      v.update("value-" + k);
      l.add((long) k);
      l.add((long) -k);
      m.put("a", k);
      if (nullValue) {
        m.put("none", null);
      }
    }
  }

  /** Every key's state as text, for the keys this backend owns. */
  private Map<Integer, String> read(CheckpointableKeyedStateBackend<Integer> b) throws Exception {
    ValueState<String> v =
        b.getPartitionedState(VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, valueDesc);
    ListState<Long> l =
        b.getPartitionedState(VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, listDesc);
    MapState<String, Integer> m =
        b.getPartitionedState(VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, mapDesc);
    Map<Integer, String> out = new TreeMap<>();
    for (int k = 0; k < KEYS; k++) {
      int kg = org.apache.flink.runtime.state.KeyGroupRangeAssignment.assignToKeyGroup(k, MAX);
      if (!b.getKeyGroupRange().contains(kg)) {
        continue;
      }
      b.setCurrentKey(k);
      Map<String, Integer> mm = new TreeMap<>();
      for (Map.Entry<String, Integer> e : m.entries()) {
        mm.put(e.getKey(), e.getValue());
      }
      List<Long> ll = new ArrayList<>();
      Iterable<Long> it = l.get();
      if (it != null) {
        it.forEach(ll::add);
      }
      out.put(k, v.value() + " " + ll + " " + mm + " " + m.contains("none"));
    }
    return out;
  }

  private static Map<Integer, String> expected(boolean nullValue) {
    Map<Integer, String> out = new TreeMap<>();
    for (int k = 0; k < KEYS; k++) {
      out.put(
          k,
          "value-"
              + k
              + " ["
              + k
              + ", "
              + -k
              + "] {a="
              + k
              + (nullValue ? ", none=null} true" : "} false"));
    }
    return out;
  }

  private static KeyedStateHandle savepoint(CheckpointableKeyedStateBackend<Integer> b)
      throws Exception {
    // As Flink's operators take a canonical savepoint: the backend's savepoint
    // resources, written by Flink's SavepointSnapshotStrategy.
    org.apache.flink.runtime.state.SavepointResources<Integer> res = b.savepoint();
    RunnableFuture<SnapshotResult<KeyedStateHandle>> f =
        new org.apache.flink.runtime.state.SnapshotStrategyRunner<>(
                "savepoint",
                new org.apache.flink.runtime.state.SavepointSnapshotStrategy<>(
                    res.getSnapshotResources()),
                new CloseableRegistry(),
                res.getPreferredSnapshotExecutionType())
            .snapshot(
                7,
                0,
                new MemCheckpointStreamFactory(64 << 20),
                CheckpointOptions.alignedNoTimeout(
                    SavepointType.savepoint(SavepointFormatType.CANONICAL),
                    CheckpointStorageLocationReference.getDefault()));
    f.run();
    KeyedStateHandle h = f.get().getJobManagerOwnedSnapshot();
    assertThat(h).isInstanceOf(KeyGroupsSavepointStateHandle.class);
    return h;
  }

  private static void close(CheckpointableKeyedStateBackend<Integer> b) throws Exception {
    b.dispose();
    b.close();
  }

  @Test
  void statedToHashMapAndRescaled() throws Exception {
    CheckpointableKeyedStateBackend<Integer> src =
        open(stated(), KeyGroupRange.of(0, MAX - 1), List.of());
    write(src, true);
    KeyedStateHandle h = savepoint(src);
    close(src);

    CheckpointableKeyedStateBackend<Integer> heap =
        open(new HashMapStateBackend(), KeyGroupRange.of(0, MAX - 1), List.of(h));
    assertThat(read(heap)).isEqualTo(expected(true));
    close(heap);

    // Rescaled to two subtasks of stated: each gets exactly its key groups.
    Map<Integer, String> both = new TreeMap<>();
    for (KeyGroupRange r : List.of(KeyGroupRange.of(0, 63), KeyGroupRange.of(64, MAX - 1))) {
      CheckpointableKeyedStateBackend<Integer> part = open(stated(), r, List.of(h));
      Map<Integer, String> got = read(part);
      assertThat(got).isNotEmpty();
      both.putAll(got);
      close(part);
    }
    assertThat(both).isEqualTo(expected(true));
  }

  @Test
  void hashMapToStated() throws Exception {
    CheckpointableKeyedStateBackend<Integer> src =
        open(new HashMapStateBackend(), KeyGroupRange.of(0, MAX - 1), List.of());
    // No null map value here: Flink 2.3.0's heap backend cannot write one
    // into a canonical savepoint (it serializes the null it flagged).
    write(src, false);
    KeyedStateHandle h = savepoint(src);
    close(src);
    CheckpointableKeyedStateBackend<Integer> dst =
        open(stated(), KeyGroupRange.of(0, MAX - 1), List.of(h));
    assertThat(read(dst)).isEqualTo(expected(false));
    close(dst);
  }

  private static final String TIMERS = "_timer_state/event_user-timers";

  private static TimerSerializer<Integer, VoidNamespace> timerSerializer() {
    return new TimerSerializer<>(IntSerializer.INSTANCE, VoidNamespaceSerializer.INSTANCE);
  }

  /** Every timer of the queue (drained), as "key@timestamp". */
  private static TreeSet<String> drain(
      KeyGroupedInternalPriorityQueue<TimerHeapInternalTimer<Integer, VoidNamespace>> q) {
    TreeSet<String> out = new TreeSet<>();
    TimerHeapInternalTimer<Integer, VoidNamespace> t;
    while ((t = q.poll()) != null) {
      out.add(t.getKey() + "@" + t.getTimestamp());
    }
    return out;
  }

  /**
   * Flink's HashMap backend (as RocksDB's for savepoints) writes its timer queues into a canonical
   * savepoint as PRIORITY_QUEUE states; stated restores them into the queue the timer service asks
   * for by name, whole and rescaled to two subtasks, each with exactly its key groups' timers.
   * Before, such a restore failed ("the snapshot holds entries of state ... of type
   * PRIORITY_QUEUE").
   */
  @Test
  void hashMapTimersToStated() throws Exception {
    CheckpointableKeyedStateBackend<Integer> src =
        open(new HashMapStateBackend(), KeyGroupRange.of(0, MAX - 1), List.of());
    write(src, false);
    KeyGroupedInternalPriorityQueue<TimerHeapInternalTimer<Integer, VoidNamespace>> q =
        src.create(TIMERS, timerSerializer());
    TreeSet<String> want = new TreeSet<>();
    for (int k = 0; k < KEYS; k++) {
      for (long ts : new long[] {1000L + k, 5000L}) {
        q.add(new TimerHeapInternalTimer<>(ts, k, VoidNamespace.INSTANCE));
        want.add(k + "@" + ts);
      }
    }
    KeyedStateHandle h = savepoint(src);
    close(src);

    CheckpointableKeyedStateBackend<Integer> dst =
        open(stated(), KeyGroupRange.of(0, MAX - 1), List.of(h));
    assertThat(read(dst)).isEqualTo(expected(false));
    assertThat(drain(dst.create(TIMERS, timerSerializer()))).isEqualTo(want);
    close(dst);

    TreeSet<String> both = new TreeSet<>();
    for (KeyGroupRange r : List.of(KeyGroupRange.of(0, 63), KeyGroupRange.of(64, MAX - 1))) {
      CheckpointableKeyedStateBackend<Integer> part = open(stated(), r, List.of(h));
      TreeSet<String> got = drain(part.create(TIMERS, timerSerializer()));
      assertThat(got).isNotEmpty();
      for (String t : got) {
        int key = Integer.parseInt(t.substring(0, t.indexOf('@')));
        assertThat(r.contains(KeyGroupRangeAssignment.assignToKeyGroup(key, MAX)))
            .as("timer %s restored in %s", t, r)
            .isTrue();
      }
      both.addAll(got);
      close(part);
    }
    assertThat(both).isEqualTo(want);
  }

  /**
   * Flink's task closes the registry it passes for the restore as soon as the backend is built
   * (StreamTaskStateInitializerImpl); a checkpoint taken afterwards must not use it. On the first
   * version every checkpoint in a real job was declined with "Cannot register Closeable, registry
   * is already closed".
   */
  @Test
  void checkpointAfterTheRestoreRegistryIsClosed() throws Exception {
    CloseableRegistry restoreRegistry = new CloseableRegistry();
    CheckpointableKeyedStateBackend<Integer> b =
        open(stated(), KeyGroupRange.of(0, MAX - 1), List.of(), restoreRegistry);
    restoreRegistry.close();
    write(b, false);
    RunnableFuture<SnapshotResult<KeyedStateHandle>> f =
        b.snapshot(
            3,
            0,
            new MemCheckpointStreamFactory(64 << 20),
            CheckpointOptions.forCheckpointWithDefaultLocation());
    f.run();
    KeyedStateHandle h = f.get().getJobManagerOwnedSnapshot();
    close(b);
    CheckpointableKeyedStateBackend<Integer> restored =
        open(stated(), KeyGroupRange.of(0, MAX - 1), List.of(h));
    assertThat(read(restored)).isEqualTo(expected(false));
    close(restored);
  }
}
