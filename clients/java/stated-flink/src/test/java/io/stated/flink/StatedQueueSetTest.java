package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.List;
import java.util.Random;
import java.util.TreeSet;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.typeutils.base.IntSerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.operators.testutils.MockEnvironment;
import org.apache.flink.runtime.operators.testutils.MockEnvironmentBuilder;
import org.apache.flink.runtime.state.CheckpointableKeyedStateBackend;
import org.apache.flink.runtime.state.IncrementalRemoteKeyedStateHandle;
import org.apache.flink.runtime.state.InternalPriorityQueue;
import org.apache.flink.runtime.state.InternalPriorityQueueTestBase;
import org.apache.flink.runtime.state.KeyGroupedInternalPriorityQueue;
import org.apache.flink.runtime.state.KeyGroupsStateHandle;
import org.apache.flink.runtime.state.KeyedStateBackendParametersImpl;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.StateBackend;
import org.apache.flink.runtime.state.ttl.TtlTimeProvider;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Timer queues kept in the daemon ({@link StatedQueues}, {@link StatedQueueSet}) against a real
 * daemon: Flink's own {@link InternalPriorityQueueTestBase} on a backend's queue, then this
 * backend's own cases with more elements per key group than the JVM caches (refills from the
 * daemon, removals of elements only the daemon holds), checked against a model at every step, and
 * restores of such a queue from a canonical and from an incremental checkpoint.
 */
@Tag("daemon-views")
public class StatedQueueSetTest extends InternalPriorityQueueTestBase {
  @RegisterExtension static final TestDaemon DAEMON = TestDaemon.withExternalDir();
  private final List<CheckpointableKeyedStateBackend<?>> backends = new ArrayList<>();

  @AfterEach
  void disposeBackends() {
    for (CheckpointableKeyedStateBackend<?> b : backends) {
      b.dispose();
    }
    backends.clear();
  }

  private static StateBackend stated(boolean incremental) {
    return stated(incremental, "daemon");
  }

  private static StateBackend stated(boolean incremental, String timerService) {
    Configuration c = new Configuration();
    c.set(StatedOptions.SOCKET, DAEMON.socket());
    c.set(StatedOptions.BACKEND_KIND, "lsm");
    c.set(StatedOptions.INCREMENTAL, incremental);
    c.set(StatedOptions.TIMER_SERVICE, timerService);
    return new StatedStateBackendFactory().createFromConfig(c, null);
  }

  private CheckpointableKeyedStateBackend<Integer> open(
      StateBackend b, JobID job, Collection<KeyedStateHandle> handles) throws Exception {
    MockEnvironment env = new MockEnvironmentBuilder().build();
    CheckpointableKeyedStateBackend<Integer> backend =
        b.createKeyedStateBackend(
            new KeyedStateBackendParametersImpl<>(
                env,
                job,
                "op",
                IntSerializer.INSTANCE,
                KEY_GROUP_RANGE.getNumberOfKeyGroups(),
                KEY_GROUP_RANGE,
                env.getTaskKvStateRegistry(),
                TtlTimeProvider.DEFAULT,
                new UnregisteredMetricsGroup(),
                (name, value) -> {},
                handles,
                new CloseableRegistry(),
                1.0));
    backends.add(backend);
    return backend;
  }

  private static KeyGroupedInternalPriorityQueue<TestElement> queue(
      CheckpointableKeyedStateBackend<Integer> b) {
    assertThat(((StatedKeyedStateBackend<?>) b).daemonQueues())
        .as("the backend's daemon queues")
        .isNotNull();
    return b.create("timers", TestElementSerializer.INSTANCE);
  }

  @Override
  protected InternalPriorityQueue<TestElement> newPriorityQueue(int initialCapacity) {
    try {
      return queue(open(stated(false), new JobID(), List.of()));
    } catch (Exception e) {
      throw new IllegalStateException(e);
    }
  }

  @Override
  protected boolean testSetSemanticsAgainstDuplicateElements() {
    return true;
  }

  /**
   * The model's order: priority, then key. Elements of equal priority in different key groups come
   * in either order (the partitioned queue breaks ties by key group heads), so the checks compare
   * priorities and membership.
   */
  private static final Comparator<TestElement> ORDER =
      Comparator.comparingLong(TestElement::getPriority).thenComparingLong(TestElement::getKey);

  /**
   * Many more elements per key group than the cache holds, with adds, removes (also of elements
   * that only the daemon holds, and of absent ones) and polls interleaved: the queue's head, size
   * and poll order match a sorted set at every step.
   */
  @Test
  void manyElementsMatchTheModel() throws Exception {
    KeyGroupedInternalPriorityQueue<TestElement> q = queue(open(stated(false), new JobID(), null));
    TreeSet<TestElement> model = new TreeSet<>(ORDER);
    Random rnd = new Random(7);
    int perKeyGroup = 3 * StatedQueueSet.CACHE_CAPACITY;
    for (int step = 0; step < 6000; step++) {
      int op = rnd.nextInt(10);
      if (op < 6 || model.size() < 10) {
        TestElement e = new TestElement(rnd.nextInt(perKeyGroup), rnd.nextInt(2000));
        q.add(e);
        model.add(e);
      } else if (op < 8) {
        TestElement e =
            rnd.nextBoolean() && !model.isEmpty()
                ? new ArrayList<>(model).get(rnd.nextInt(model.size()))
                : new TestElement(rnd.nextInt(perKeyGroup), 5000 + rnd.nextInt(10));
        q.remove(e);
        model.remove(e);
      } else {
        TestElement polled = q.poll();
        assertHead(polled, model, "poll at step " + step);
        model.remove(polled);
      }
      assertHead(q.peek(), model, "head at step " + step);
    }
    assertThat(q.size()).isEqualTo(model.size());
    assertDrains(q, model);
    assertThat(q.isEmpty()).isTrue();
  }

  /**
   * Timers as a job registers them, each later than the ones before: past the cache's capacity they
   * live in the daemon only, and come back in order as the cache drains.
   */
  @Test
  void increasingElementsBeyondTheCache() throws Exception {
    KeyGroupedInternalPriorityQueue<TestElement> q = queue(open(stated(false), new JobID(), null));
    TreeSet<TestElement> model = new TreeSet<>(ORDER);
    for (int i = 0; i < 10 * StatedQueueSet.CACHE_CAPACITY; i++) {
      TestElement e = new TestElement(42, i);
      q.add(e);
      model.add(e);
    }
    assertThat(q.size()).isEqualTo(model.size());
    assertDrains(q, model);
  }

  /** A canonical checkpoint holds the queue as a PRIORITY_QUEUE state and restores it whole. */
  @Test
  void restoresFromACanonicalCheckpoint() throws Exception {
    restores(false);
  }

  /** An incremental checkpoint holds the queue in the daemon's files and restores it whole. */
  @Test
  void restoresFromAnIncrementalCheckpoint() throws Exception {
    restores(true);
  }

  /**
   * A canonical checkpoint with daemon timers restores on heap timers (Flink's PRIORITY_QUEUE
   * states, loaded into the heap queues); an incremental one cannot (its timers are in the daemon's
   * files) and says which option to set.
   */
  @Test
  void heapTimersRestoreCanonicalAndRefuseIncremental() throws Exception {
    for (boolean incremental : new boolean[] {false, true}) {
      JobID job = new JobID();
      CheckpointableKeyedStateBackend<Integer> b = open(stated(incremental), job, null);
      KeyGroupedInternalPriorityQueue<TestElement> q = queue(b);
      TreeSet<TestElement> model = new TreeSet<>(ORDER);
      for (int i = 0; i < 500; i++) {
        TestElement e = new TestElement(i, 1000 - i);
        q.add(e);
        model.add(e);
      }
      KeyedStateHandle h = Checkpoints.take(b, 1);
      if (incremental) {
        assertThatThrownBy(() -> open(stated(true, "heap"), job, List.of(h)))
            .hasMessageContaining("timer queue timers")
            .hasMessageContaining(StatedOptions.TIMER_SERVICE.key() + ": daemon");
      } else {
        CheckpointableKeyedStateBackend<Integer> r = open(stated(false, "heap"), job, List.of(h));
        assertThat(((StatedKeyedStateBackend<?>) r).daemonQueues()).isNull();
        assertDrains(r.create("timers", TestElementSerializer.INSTANCE), model);
      }
    }
  }

  private void restores(boolean incremental) throws Exception {
    JobID job = new JobID();
    CheckpointableKeyedStateBackend<Integer> b = open(stated(incremental), job, null);
    KeyGroupedInternalPriorityQueue<TestElement> q = queue(b);
    TreeSet<TestElement> model = new TreeSet<>(ORDER);
    Random rnd = new Random(11);
    for (int i = 0; i < 2000; i++) {
      TestElement e = new TestElement(rnd.nextInt(1000), rnd.nextInt(100_000));
      q.add(e);
      model.add(e);
    }
    for (int i = 0; i < 300; i++) {
      TestElement polled = q.poll();
      assertHead(polled, model, "poll " + i);
      model.remove(polled);
    }
    KeyedStateHandle h = Checkpoints.take(b, 1);
    assertThat(h)
        .isInstanceOf(
            incremental ? IncrementalRemoteKeyedStateHandle.class : KeyGroupsStateHandle.class);
    // Changes after the snapshot are in no restore of it.
    q.add(new TestElement(1, -1));
    q.poll();
    q.poll();

    KeyGroupedInternalPriorityQueue<TestElement> r =
        queue(open(stated(incremental), job, List.of(h)));
    assertThat(r.size()).isEqualTo(model.size());
    assertHead(r.peek(), model, "head after the restore");
    assertDrains(r, model);
  }

  /** {@code head} is one of the model's elements of the smallest priority (null: model empty). */
  private static void assertHead(TestElement head, TreeSet<TestElement> model, String what) {
    if (model.isEmpty()) {
      assertThat(head).as(what).isNull();
      return;
    }
    assertThat(head).as(what).isNotNull();
    assertThat(head.getPriority()).as(what).isEqualTo(model.first().getPriority());
    assertThat(model).as(what).contains(head);
  }

  /** Polling {@code q} empty gives the model's elements, in priority order. */
  private static void assertDrains(
      InternalPriorityQueue<TestElement> q, TreeSet<TestElement> model) {
    List<TestElement> out = new ArrayList<>();
    for (TestElement e = q.poll(); e != null; e = q.poll()) {
      out.add(e);
    }
    assertThat(out).isSortedAccordingTo(Comparator.comparingLong(TestElement::getPriority));
    assertThat(out).containsExactlyInAnyOrderElementsOf(model);
  }
}
