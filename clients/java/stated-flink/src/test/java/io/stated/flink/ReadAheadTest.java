package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;

import io.stated.client.Daemon;
import java.util.ArrayList;
import java.util.List;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeutils.base.IntSerializer;
import org.apache.flink.api.common.typeutils.base.LongSerializer;
import org.apache.flink.api.common.typeutils.base.StringSerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.runtime.state.CheckpointableKeyedStateBackend;
import org.apache.flink.runtime.state.KeyGroupedInternalPriorityQueue;
import org.apache.flink.runtime.state.VoidNamespace;
import org.apache.flink.runtime.state.VoidNamespaceSerializer;
import org.apache.flink.runtime.state.internal.InternalValueState;
import org.apache.flink.streaming.api.operators.TimerHeapInternalTimer;
import org.apache.flink.streaming.api.operators.TimerSerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * Reading ahead: which states a miss takes along ({@link ReadAhead}) and what that saves and
 * answers against a real daemon, with a cache too small for the state so that reads miss.
 */
class ReadAheadTest {
  private static final int MAX = 128;

  /** About ten keys' entries: everything written long enough ago has left the cache. */
  private static final long CACHE = 8000;

  @RegisterExtension static final TestDaemon DAEMON = TestDaemon.plain();

  private CheckpointableKeyedStateBackend<Integer> b;

  @AfterEach
  void closeBackend() throws Exception {
    if (b != null) {
      b.dispose();
      b.close();
    }
  }

  private CheckpointableKeyedStateBackend<Integer> open(boolean readAhead) throws Exception {
    return open(readAhead, CACHE);
  }

  private CheckpointableKeyedStateBackend<Integer> open(boolean readAhead, long cacheBytes)
      throws Exception {
    return open(DAEMON.daemon(), readAhead, cacheBytes);
  }

  private CheckpointableKeyedStateBackend<Integer> open(
      Daemon d, boolean readAhead, long cacheBytes) throws Exception {
    Configuration c = new Configuration();
    c.set(StatedOptions.SOCKET, d.socket.toString());
    c.set(StatedOptions.CACHE_SIZE, new MemorySize(cacheBytes));
    c.set(StatedOptions.READ_AHEAD, readAhead);
    return KeyedBackends.open(c, MAX, List.of());
  }

  private long trips() {
    return ((StatedKeyedStateBackend<?>) b).daemon().roundTrips();
  }

  @Test
  void learnsWhichStatesAreReadTogether() {
    ReadAhead r = new ReadAhead();
    for (int i = 0; i < ReadAhead.WARM_UP; i++) {
      assertThat(r.along(0)).as("before the warm-up").isZero();
      r.read(0);
      r.read(1);
      if (i % 4 == 0) {
        r.read(2); // a quarter of state 0's contexts: taken along
      }
      if (i % 8 == 0) {
        r.read(3); // an eighth: not
      }
      r.endContext();
    }
    assertThat(r.along(0)).isEqualTo(0b0110);
    // State 2 was read in 4 contexts, always with 0 and 1.
    assertThat(r.along(2)).isZero();
    for (int i = 0; i < 12; i++) {
      r.read(2);
      r.endContext();
    }
    assertThat(r.along(2)).isEqualTo(0b0011);
    // A pattern that changes: after many contexts of 0 alone, nothing goes along.
    for (int i = 0; i < 4 * ReadAhead.DECAY_AT; i++) {
      r.read(0);
      r.endContext();
    }
    assertThat(r.along(0)).isZero();
    // Ids past the mask are neither counted nor take anything along.
    r.read(ReadAhead.MAX_STATES);
    r.endContext();
    assertThat(r.along(ReadAhead.MAX_STATES)).isZero();
  }

  /**
   * Each key's context reads four states (value, value, map, list) that all left the cache: one
   * round trip with reading ahead, four without, and the same answers. A state read in a tenth of
   * the contexts is not taken along. The map read ahead is known whole: asking for a user key it
   * lacks needs no round trip.
   */
  @ParameterizedTest(name = "read-ahead {0}")
  @ValueSource(booleans = {true, false})
  void aMissTakesTheKeysOtherStatesAlong(boolean on) throws Exception {
    b = open(on);
    ValueState<Long> a = value("a");
    ValueState<Long> c = value("c");
    ValueState<Long> rare = value("rare");
    MapState<Integer, Long> m =
        b.getPartitionedState(
            VoidNamespace.INSTANCE,
            VoidNamespaceSerializer.INSTANCE,
            new MapStateDescriptor<>("m", IntSerializer.INSTANCE, LongSerializer.INSTANCE));
    ListState<Long> l =
        b.getPartitionedState(
            VoidNamespace.INSTANCE,
            VoidNamespaceSerializer.INSTANCE,
            new ListStateDescriptor<>("l", LongSerializer.INSTANCE));
    int keys = 300;
    for (int k = 0; k < keys; k++) {
      b.setCurrentKey(k);
      a.update((long) k);
      c.update(2L * k);
      m.put(1, 3L * k);
      l.add(4L * k);
      if (k % 10 == 0) {
        rare.update(5L * k);
      }
    }
    // Keys 0-199 left the cache while the later ones were written, and
    // reading them evicts only keys read before.
    long common = 0;
    long commonContexts = 0;
    long rareTrips = 0;
    long rareContexts = 0;
    for (int k = 0; k < 200; k++) {
      b.setCurrentKey(k);
      long before = trips();
      assertThat(a.value()).isEqualTo(k);
      assertThat(c.value()).isEqualTo(2L * k);
      assertThat(m.get(1)).isEqualTo(3L * k);
      assertThat(l.get()).containsExactly(4L * k);
      if (k % 10 == 0) {
        assertThat(rare.value()).isEqualTo(5L * k);
      }
      long t = trips() - before;
      if (k < ReadAhead.WARM_UP) {
        continue;
      }
      if (k % 10 == 0) {
        rareTrips += t;
        rareContexts++;
      } else {
        common += t;
        commonContexts++;
        long beforeAbsent = trips();
        assertThat(m.contains(2)).isFalse();
        if (on) {
          assertThat(trips() - beforeAbsent).as("a user key the whole map lacks").isZero();
        }
      }
    }
    if (on) {
      assertThat(common)
          .as("round trips of %d contexts of four reads", commonContexts)
          .isEqualTo(commonContexts);
      // Its own read, one more for the state not taken along.
      assertThat(rareTrips).isEqualTo(2 * rareContexts);
      assertThat(((StatedKeyedStateBackend<?>) b).readAheadEntries()).isPositive();
    } else {
      assertThat(common).isEqualTo(4 * commonContexts);
      assertThat(((StatedKeyedStateBackend<?>) b).readAheadEntries()).isZero();
    }
  }

  /**
   * A state whose current namespace is not the missing read's is not read ahead: its read at its
   * own namespace is a round trip of its own, and answers that namespace's value.
   */
  @Test
  void onlyStatesAtTheSameNamespaceGoAlong() throws Exception {
    b = open(true);
    InternalValueState<Integer, String, Long> x = nsValue("x");
    InternalValueState<Integer, String, Long> y = nsValue("y");
    int keys = 200;
    for (int k = 0; k < keys; k++) {
      b.setCurrentKey(k);
      for (String ns : List.of("n1", "n2")) {
        x.setCurrentNamespace(ns);
        y.setCurrentNamespace(ns);
        x.update((long) k);
        y.update(ns.equals("n1") ? 10L * k : 20L * k);
      }
    }
    List<Long> tripsAtOther = new ArrayList<>();
    for (int k = 0; k < 100; k++) {
      b.setCurrentKey(k);
      boolean same = k < 50;
      x.setCurrentNamespace("n1");
      y.setCurrentNamespace(same ? "n1" : "n2");
      long before = trips();
      long aheadBefore = ((StatedKeyedStateBackend<?>) b).readAheadEntries();
      assertThat(x.value()).isEqualTo(k);
      long afterX = trips();
      long ahead = ((StatedKeyedStateBackend<?>) b).readAheadEntries() - aheadBefore;
      assertThat(y.value()).isEqualTo(same ? 10L * k : 20L * k);
      long t = trips() - afterX;
      if (k >= ReadAhead.WARM_UP && same) {
        assertThat(afterX - before).isEqualTo(1);
        assertThat(t).as("y at x's namespace, read along with x").isZero();
      } else if (!same) {
        tripsAtOther.add(t);
        assertThat(ahead).as("entries read along at another namespace").isZero();
      }
    }
    assertThat(tripsAtOther).hasSize(50).containsOnly(1L);
  }

  /**
   * Timers due at the same time fire one after another, each reading its key's states: a miss while
   * one fires also reads the states of the timers due with it in its key group's cached head
   * ({@link StatedKeyedStateBackend#DUE_TIMERS_AHEAD} at most), so most firings find their state
   * cached. Driven as Flink's timer service fires event-time timers: peek, set the key, poll, call
   * the operator.
   */
  @ParameterizedTest(name = "read-ahead {0}")
  @ValueSource(booleans = {true, false})
  void dueTimersKeysAreReadAhead(boolean on) throws Exception {
    b = open(on, 64 << 10);
    ValueState<Long> a = value("a");
    ValueState<Long> c = value("c");
    KeyGroupedInternalPriorityQueue<TimerHeapInternalTimer<Integer, VoidNamespace>> timers =
        eventTimers();
    int keys = 4000;
    for (int k = 0; k < keys; k++) {
      b.setCurrentKey(k);
      a.update((long) k);
      c.update(2L * k);
      timers.add(new TimerHeapInternalTimer<>(1000, k, VoidNamespace.INSTANCE));
      // A later timer of every tenth key, which must not be read ahead with the first ones.
      if (k % 10 == 0) {
        timers.add(new TimerHeapInternalTimer<>(2000, k, VoidNamespace.INSTANCE));
      }
    }
    long before = trips();
    int fired = 0;
    for (TimerHeapInternalTimer<Integer, VoidNamespace> t;
        (t = timers.peek()) != null && t.getTimestamp() <= 1000; ) {
      b.setCurrentKey(t.getKey());
      timers.poll();
      assertThat(a.value()).isEqualTo((long) t.getKey());
      assertThat(c.value()).isEqualTo(2L * t.getKey());
      fired++;
    }
    long trips = trips() - before;
    System.out.printf("read-ahead %s: %d round trips to fire %d timers%n", on, trips, fired);
    assertThat(fired).isEqualTo(keys);
    if (on) {
      // 128 key groups of about 31 timers each: about one round trip per
      // key group once the two states are known to be read together.
      assertThat(trips).as("round trips of %d firings", fired).isLessThan(keys / 8);
    } else {
      // Two per firing, but for the few keys written last, still cached.
      assertThat(trips).isGreaterThan(2L * keys * 9 / 10);
    }
    // The later timers' firings read what they must (the cache is coherent).
    for (TimerHeapInternalTimer<Integer, VoidNamespace> t; (t = timers.peek()) != null; ) {
      b.setCurrentKey(t.getKey());
      timers.poll();
      assertThat(a.value()).isEqualTo((long) t.getKey());
      assertThat(t.getTimestamp()).isEqualTo(2000);
    }
  }

  /**
   * Reads ahead whose answers would pass the daemon's response size limit fail there one by one
   * (RESOURCE_EXHAUSTED): they are left out of the cache, the read that missed still gets its
   * answer, and every later read gets the right value.
   */
  @Test
  void readsAheadTheDaemonRefusesCostNothing() throws Exception {
    try (Daemon small = new Daemon("--max-message-size", "256KiB", "--max-value-size", "64KiB")) {
      small.start();
      b = open(small, true, 4 << 20);
      ValueState<Long> a = value("a");
      ValueState<byte[]> big =
          b.getPartitionedState(
              VoidNamespace.INSTANCE,
              VoidNamespaceSerializer.INSTANCE,
              new ValueStateDescriptor<>(
                  "big", PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO));
      KeyGroupedInternalPriorityQueue<TimerHeapInternalTimer<Integer, VoidNamespace>> timers =
          eventTimers();
      int keys = 4000;
      for (int k = 0; k < keys; k++) {
        b.setCurrentKey(k);
        a.update((long) k);
        big.update(bigValue(k));
        timers.add(new TimerHeapInternalTimer<>(1000, k, VoidNamespace.INSTANCE));
      }
      // 4000 keys of 16 KiB do not fit the 4 MiB cache; 32 of them read
      // ahead are 512 KiB, past the daemon's 256 KiB.
      int fired = 0;
      for (TimerHeapInternalTimer<Integer, VoidNamespace> t; (t = timers.poll()) != null; ) {
        b.setCurrentKey(t.getKey());
        assertThat(a.value()).isEqualTo((long) t.getKey());
        assertThat(big.value()).isEqualTo(bigValue(t.getKey()));
        fired++;
      }
      assertThat(fired).isEqualTo(keys);
      assertThat(((StatedKeyedStateBackend<?>) b).readAheadEntries()).isPositive();
      closeBackend();
      b = null;
    }
  }

  /** The backend's queue of event-time timers, as Flink's timer service makes it. */
  private KeyGroupedInternalPriorityQueue<TimerHeapInternalTimer<Integer, VoidNamespace>>
      eventTimers() {
    return b.create(
        "_timer_state/event_user-timers",
        new TimerSerializer<>(IntSerializer.INSTANCE, VoidNamespaceSerializer.INSTANCE));
  }

  private static byte[] bigValue(int k) {
    byte[] v = new byte[16 << 10];
    java.util.Arrays.fill(v, (byte) k);
    v[0] = (byte) (k >> 8);
    return v;
  }

  private ValueState<Long> value(String name) throws Exception {
    return b.getPartitionedState(
        VoidNamespace.INSTANCE,
        VoidNamespaceSerializer.INSTANCE,
        new ValueStateDescriptor<>(name, LongSerializer.INSTANCE));
  }

  @SuppressWarnings("unchecked")
  private InternalValueState<Integer, String, Long> nsValue(String name) throws Exception {
    return (InternalValueState<Integer, String, Long>)
        b.getOrCreateKeyedState(
            StringSerializer.INSTANCE, new ValueStateDescriptor<>(name, LongSerializer.INSTANCE));
  }
}
