package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.state.AggregatingStateDescriptor;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ReducingStateDescriptor;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeutils.base.IntSerializer;
import org.apache.flink.api.common.typeutils.base.LongSerializer;
import org.apache.flink.api.common.typeutils.base.StringSerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.runtime.state.CheckpointableKeyedStateBackend;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.internal.InternalAggregatingState;
import org.apache.flink.runtime.state.internal.InternalListState;
import org.apache.flink.runtime.state.internal.InternalMapState;
import org.apache.flink.runtime.state.internal.InternalReducingState;
import org.apache.flink.runtime.state.internal.InternalValueState;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The cache against a model: random reads, writes, removes, clears, namespace switches and merges
 * on value, list, map, reducing and aggregating state, with snapshots restored into a new backend
 * (whose cache starts empty) along the way. Every read is compared with the model; at the end, and
 * after each restore, all of the model is read back, so the daemon (which a restore reads) must
 * have every write the cache answered from. A restore warms the new cache with what it loads: read
 * back right after, a restore that fits the cache needs no round trip. Run with the cache off, with
 * caches too small for the restored state (3000 bytes evict all the time, 12000 often) and with one
 * that holds all of it.
 */
@Tag("daemon-views")
class StateCacheCoherenceTest {
  private static final int MAX = 128;
  private static final int KEYS = 40;
  private static final String[] NAMESPACES = {"a", "b", "c", "d"};

  /** A cache that holds all of the test's state. */
  private static final long FITS = 64 << 20;

  @RegisterExtension static final TestDaemon DAEMON = TestDaemon.plain();

  private final ValueStateDescriptor<Long> valueDesc =
      new ValueStateDescriptor<>("value", LongSerializer.INSTANCE);
  private final ListStateDescriptor<Long> listDesc =
      new ListStateDescriptor<>("list", LongSerializer.INSTANCE);
  private final MapStateDescriptor<Integer, Long> mapDesc =
      new MapStateDescriptor<>("map", IntSerializer.INSTANCE, LongSerializer.INSTANCE);
  private final ReducingStateDescriptor<Long> reduceDesc =
      new ReducingStateDescriptor<>("reduce", Long::sum, LongSerializer.INSTANCE);
  private final AggregatingStateDescriptor<Long, Long, String> aggDesc =
      new AggregatingStateDescriptor<>("agg", new MaxAsText(), LongSerializer.INSTANCE);

  /** Keeps the maximum; its result is text, so get() and getInternal() differ. */
  static final class MaxAsText implements AggregateFunction<Long, Long, String> {
    private static final long serialVersionUID = 1L;

    @Override
    public Long createAccumulator() {
      return Long.MIN_VALUE;
    }

    @Override
    public Long add(Long value, Long acc) {
      return Math.max(value, acc);
    }

    @Override
    public String getResult(Long acc) {
      return "max=" + acc;
    }

    @Override
    public Long merge(Long a, Long b) {
      return Math.max(a, b);
    }
  }

  private CheckpointableKeyedStateBackend<Integer> open(long cacheBytes, List<KeyedStateHandle> hs)
      throws Exception {
    Configuration c = new Configuration();
    c.set(StatedOptions.SOCKET, DAEMON.socket());
    c.set(StatedOptions.CACHE_SIZE, new MemorySize(cacheBytes));
    return KeyedBackends.open(c, MAX, hs);
  }

  /** The states of one backend, as the internal interfaces (namespace switches, merges). */
  private final class States {
    final CheckpointableKeyedStateBackend<Integer> b;
    final InternalValueState<Integer, String, Long> value;
    final InternalListState<Integer, String, Long> list;
    final InternalMapState<Integer, String, Integer, Long> map;
    final InternalReducingState<Integer, String, Long> reduce;
    final InternalAggregatingState<Integer, String, Long, Long, String> agg;

    @SuppressWarnings("unchecked")
    States(CheckpointableKeyedStateBackend<Integer> b) throws Exception {
      this.b = b;
      StringSerializer s = StringSerializer.INSTANCE;
      value = (InternalValueState<Integer, String, Long>) b.getOrCreateKeyedState(s, valueDesc);
      list = (InternalListState<Integer, String, Long>) b.getOrCreateKeyedState(s, listDesc);
      map = (InternalMapState<Integer, String, Integer, Long>) b.getOrCreateKeyedState(s, mapDesc);
      reduce =
          (InternalReducingState<Integer, String, Long>) b.getOrCreateKeyedState(s, reduceDesc);
      agg =
          (InternalAggregatingState<Integer, String, Long, Long, String>)
              b.getOrCreateKeyedState(s, aggDesc);
    }

    void at(int key, String ns) {
      b.setCurrentKey(key);
      value.setCurrentNamespace(ns);
      list.setCurrentNamespace(ns);
      map.setCurrentNamespace(ns);
      reduce.setCurrentNamespace(ns);
      agg.setCurrentNamespace(ns);
    }
  }

  /** The model: per state, (key, namespace) to the value, list or map. */
  private final Map<String, Map<String, Object>> model = new HashMap<>();

  private static String addr(int key, String ns) {
    return key + "/" + ns;
  }

  private Map<String, Object> of(String state) {
    return model.computeIfAbsent(state, x -> new HashMap<>());
  }

  @SuppressWarnings("unchecked")
  private List<Long> modelList(int key, String ns) {
    return (List<Long>) of("list").get(addr(key, ns));
  }

  @SuppressWarnings("unchecked")
  private TreeMap<Integer, Long> modelMap(int key, String ns) {
    return (TreeMap<Integer, Long>) of("map").get(addr(key, ns));
  }

  private static List<Long> toList(Iterable<Long> it) {
    if (it == null) {
      return null;
    }
    List<Long> out = new ArrayList<>();
    it.forEach(out::add);
    return out;
  }

  private static TreeMap<Integer, Long> toMap(Iterable<Map.Entry<Integer, Long>> it) {
    TreeMap<Integer, Long> out = new TreeMap<>();
    for (Map.Entry<Integer, Long> e : it) {
      out.put(e.getKey(), e.getValue());
    }
    return out;
  }

  /** Reads everything the model holds (and every empty address) and compares. */
  private void checkAll(States s) throws Exception {
    for (int k = 0; k < KEYS; k++) {
      for (String ns : NAMESPACES) {
        s.at(k, ns);
        String where = "key " + k + " ns " + ns;
        assertThat(s.value.value()).as("value at " + where).isEqualTo(of("value").get(addr(k, ns)));
        assertThat(toList(s.list.get())).as("list at " + where).isEqualTo(modelList(k, ns));
        TreeMap<Integer, Long> m = modelMap(k, ns);
        assertThat(toMap(s.map.entries()))
            .as("map at " + where)
            .isEqualTo(m == null ? new TreeMap<>() : m);
        assertThat(s.map.isEmpty()).as("map empty at " + where).isEqualTo(m == null || m.isEmpty());
        assertThat(s.reduce.get())
            .as("reduce at " + where)
            .isEqualTo(of("reduce").get(addr(k, ns)));
        Long acc = (Long) of("agg").get(addr(k, ns));
        assertThat(s.agg.get()).as("agg at " + where).isEqualTo(acc == null ? null : "max=" + acc);
      }
    }
  }

  private static void close(CheckpointableKeyedStateBackend<Integer> b) throws Exception {
    b.dispose();
    b.close();
  }

  @ParameterizedTest(name = "cache {0} bytes")
  @ValueSource(longs = {0, 3000, 12000, FITS})
  void matchesTheModel(long cacheBytes) throws Exception {
    Random rnd = new Random(20261204L + cacheBytes);
    States s = new States(open(cacheBytes, List.of()));
    long checkpoint = 0;
    for (int op = 0; op < 6000; op++) {
      int key = rnd.nextInt(KEYS);
      String ns = NAMESPACES[rnd.nextInt(NAMESPACES.length)];
      s.at(key, ns);
      String a = addr(key, ns);
      String where = "op " + op + " key " + key + " ns " + ns;
      long v = rnd.nextInt(1000);
      int pick = rnd.nextInt(100);
      if (pick < 10) {
        assertThat(s.value.value()).as("value at " + where).isEqualTo(of("value").get(a));
      } else if (pick < 15) {
        s.value.update(v);
        of("value").put(a, v);
      } else if (pick < 17) {
        s.value.clear();
        of("value").remove(a);
      } else if (pick < 24) {
        assertThat(toList(s.list.get())).as("list at " + where).isEqualTo(modelList(key, ns));
      } else if (pick < 29) {
        s.list.add(v);
        List<Long> l = modelList(key, ns);
        if (l == null) {
          l = new ArrayList<>();
          of("list").put(a, l);
        }
        l.add(v);
      } else if (pick < 31) {
        List<Long> nl = new ArrayList<>();
        for (int i = rnd.nextInt(3); i > 0; i--) {
          nl.add(rnd.nextLong() % 100);
        }
        s.list.update(nl);
        if (nl.isEmpty()) {
          of("list").remove(a);
        } else {
          of("list").put(a, nl);
        }
      } else if (pick < 32) {
        s.list.clear();
        of("list").remove(a);
      } else if (pick < 42) {
        int uk = rnd.nextInt(6);
        TreeMap<Integer, Long> m = modelMap(key, ns);
        if (rnd.nextBoolean()) {
          assertThat(s.map.get(uk))
              .as("map get at " + where)
              .isEqualTo(m == null ? null : m.get(uk));
        } else {
          assertThat(s.map.contains(uk))
              .as("map contains at " + where)
              .isEqualTo(m != null && m.containsKey(uk));
        }
      } else if (pick < 50) {
        int uk = rnd.nextInt(6);
        Long mv = rnd.nextInt(8) == 0 ? null : v;
        s.map.put(uk, mv);
        TreeMap<Integer, Long> m = modelMap(key, ns);
        if (m == null) {
          m = new TreeMap<>();
          of("map").put(a, m);
        }
        m.put(uk, mv);
      } else if (pick < 54) {
        int uk = rnd.nextInt(6);
        s.map.remove(uk);
        TreeMap<Integer, Long> m = modelMap(key, ns);
        if (m != null) {
          m.remove(uk);
        }
      } else if (pick < 57) {
        TreeMap<Integer, Long> m = modelMap(key, ns);
        assertThat(toMap(s.map.entries()))
            .as("map entries at " + where)
            .isEqualTo(m == null ? new TreeMap<>() : m);
        assertThat(s.map.isEmpty()).as("map empty at " + where).isEqualTo(m == null || m.isEmpty());
      } else if (pick < 59) {
        // Through the iterator: odd user keys removed, even ones doubled.
        TreeMap<Integer, Long> m = modelMap(key, ns);
        for (Iterator<Map.Entry<Integer, Long>> it = s.map.iterator(); it.hasNext(); ) {
          Map.Entry<Integer, Long> e = it.next();
          if (e.getKey() % 2 == 1) {
            it.remove();
            m.remove(e.getKey());
          } else if (e.getValue() != null) {
            e.setValue(e.getValue() * 2);
            m.put(e.getKey(), e.getValue());
          }
        }
      } else if (pick < 60) {
        s.map.clear();
        of("map").remove(a);
      } else if (pick < 67) {
        assertThat(s.reduce.get()).as("reduce at " + where).isEqualTo(of("reduce").get(a));
        Long acc = (Long) of("agg").get(a);
        assertThat(s.agg.get()).as("agg at " + where).isEqualTo(acc == null ? null : "max=" + acc);
      } else if (pick < 75) {
        s.reduce.add(v);
        of("reduce").merge(a, v, (x, y) -> (Long) x + (Long) y);
        s.agg.add(v);
        of("agg").merge(a, v, (x, y) -> Math.max((Long) x, (Long) y));
      } else if (pick < 77) {
        s.reduce.clear();
        of("reduce").remove(a);
        s.agg.clear();
        of("agg").remove(a);
      } else if (pick < 82) {
        // Session-window merges: sources (a duplicate, maybe the target) into the target.
        List<String> sources = new ArrayList<>();
        for (int i = 1 + rnd.nextInt(3); i > 0; i--) {
          sources.add(NAMESPACES[rnd.nextInt(NAMESPACES.length)]);
        }
        s.reduce.mergeNamespaces(ns, sources);
        s.agg.mergeNamespaces(ns, sources);
        s.list.mergeNamespaces(ns, sources);
        mergeModel(key, ns, sources);
      } else if (pick < 83) {
        KeyedStateHandle h = Checkpoints.take(s.b, ++checkpoint);
        if (rnd.nextBoolean()) {
          // Go on from the restored snapshot, with an empty cache.
          close(s.b);
          s = new States(open(cacheBytes, h == null ? List.of() : List.of(h)));
          checkRestored(s, cacheBytes);
        }
      }
      StatedKeyedStateBackend<?> sb = (StatedKeyedStateBackend<?>) s.b;
      assertThat(sb.cache().bytes()).isLessThanOrEqualTo(cacheBytes);
    }
    checkAll(s);
    KeyedStateHandle h = Checkpoints.take(s.b, ++checkpoint);
    close(s.b);
    // The daemon alone, through a snapshot and a restore: every write reached it.
    States restored = new States(open(cacheBytes, h == null ? List.of() : List.of(h)));
    checkRestored(restored, cacheBytes);
    StatedKeyedStateBackend<?> rb = (StatedKeyedStateBackend<?>) restored.b;
    StateCache cache = rb.cache();
    long trips = rb.daemon().roundTrips();
    checkAll(restored);
    if (cacheBytes == 3000 || cacheBytes == 12000) {
      assertThat(cache.evictions()).isPositive();
      // Misses took other states along (ReadAhead), and the reads matched.
      assertThat(rb.readAheadEntries()).isPositive();
    } else if (cacheBytes > 0) {
      // All of it fits: the second pass is served by the cache alone (a
      // miss there is an absence the complete states answer themselves).
      assertThat(rb.daemon().roundTrips()).isEqualTo(trips);
      assertThat(cache.hits()).isPositive();
    }
    close(restored.b);
  }

  /**
   * Right after a restore: the restore put what it loaded into the cache (as much as fits), so with
   * a cache that holds all of it, reading everything back (present and absent entries) needs no
   * round trip to the daemon; with a smaller one, the reads still match the model.
   */
  private void checkRestored(States s, long cacheBytes) throws Exception {
    StatedKeyedStateBackend<?> sb = (StatedKeyedStateBackend<?>) s.b;
    assertThat(sb.cache().bytes()).isLessThanOrEqualTo(cacheBytes);
    long before = sb.daemon().roundTrips();
    checkAll(s);
    long trips = sb.daemon().roundTrips() - before;
    if (cacheBytes == FITS) {
      assertThat(trips).as("round trips to read back a restore that fits the cache").isZero();
    } else if (cacheBytes == 0) {
      assertThat(trips).as("round trips without a cache").isPositive();
    }
  }

  private void mergeModel(int key, String target, List<String> sources) {
    String t = addr(key, target);
    for (String state : List.of("reduce", "agg", "list")) {
      Map<String, Object> m = of(state);
      Object merged = null;
      for (String src : new java.util.LinkedHashSet<>(sources)) {
        Object v = m.remove(addr(key, src));
        if (v != null) {
          merged = merged == null ? copy(v) : combine(state, merged, v);
        }
      }
      if (merged != null) {
        Object old = m.get(t);
        // A list keeps the target's elements first; the others commute.
        m.put(
            t,
            old == null
                ? merged
                : state.equals("list") ? combine(state, old, merged) : combine(state, merged, old));
      }
    }
  }

  private static Object copy(Object v) {
    return v instanceof List ? new ArrayList<>((List<?>) v) : v;
  }

  @SuppressWarnings("unchecked")
  private static Object combine(String state, Object a, Object b) {
    switch (state) {
      case "reduce":
        return (Long) a + (Long) b;
      case "agg":
        return Math.max((Long) a, (Long) b);
      default:
        List<Long> out = new ArrayList<>((List<Long>) a);
        out.addAll((List<Long>) b);
        return out;
    }
  }
}
