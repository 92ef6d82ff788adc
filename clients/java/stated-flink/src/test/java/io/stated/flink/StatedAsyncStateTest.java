package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.RunnableFuture;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.state.v2.AggregatingState;
import org.apache.flink.api.common.state.v2.AggregatingStateDescriptor;
import org.apache.flink.api.common.state.v2.ListState;
import org.apache.flink.api.common.state.v2.ListStateDescriptor;
import org.apache.flink.api.common.state.v2.MapState;
import org.apache.flink.api.common.state.v2.MapStateDescriptor;
import org.apache.flink.api.common.state.v2.ReducingState;
import org.apache.flink.api.common.state.v2.ReducingStateDescriptor;
import org.apache.flink.api.common.state.v2.ValueState;
import org.apache.flink.api.common.state.v2.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.BasicTypeInfo;
import org.apache.flink.api.common.typeutils.base.IntSerializer;
import org.apache.flink.api.common.typeutils.base.LongSerializer;
import org.apache.flink.api.common.typeutils.base.StringSerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Histogram;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.asyncprocessing.EpochManager;
import org.apache.flink.runtime.asyncprocessing.RecordContext;
import org.apache.flink.runtime.asyncprocessing.StateExecutionController;
import org.apache.flink.runtime.asyncprocessing.declare.DeclarationManager;
import org.apache.flink.runtime.checkpoint.CheckpointOptions;
import org.apache.flink.runtime.metrics.util.InterceptingOperatorMetricGroup;
import org.apache.flink.runtime.operators.testutils.MockEnvironment;
import org.apache.flink.runtime.state.AsyncKeyedStateBackend;
import org.apache.flink.runtime.state.CheckpointStorageLocationReference;
import org.apache.flink.runtime.state.CheckpointStreamFactory;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.runtime.state.KeyedStateBackendParametersImpl;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.SnapshotResult;
import org.apache.flink.runtime.state.VoidNamespace;
import org.apache.flink.runtime.state.VoidNamespaceSerializer;
import org.apache.flink.runtime.state.storage.JobManagerCheckpointStorage;
import org.apache.flink.runtime.state.ttl.TtlTimeProvider;
import org.apache.flink.runtime.state.v2.internal.InternalListState;
import org.apache.flink.streaming.runtime.tasks.StreamTaskActionExecutor;
import org.apache.flink.streaming.runtime.tasks.mailbox.MailboxExecutorImpl;
import org.apache.flink.streaming.runtime.tasks.mailbox.TaskMailboxImpl;
import org.apache.flink.testutils.junit.extensions.parameterized.Parameter;
import org.apache.flink.testutils.junit.extensions.parameterized.ParameterizedTestExtension;
import org.apache.flink.testutils.junit.extensions.parameterized.Parameters;
import org.apache.flink.util.IOUtils;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.TestTemplate;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * The asynchronous backend driven by Flink's own asynchronous execution controller, as an operator
 * with {@code enableAsyncState()} drives it, on a real daemon: every state kind through batches,
 * map iteration across pages, per-key order, snapshots taken while requests are in flight, restore
 * by the asynchronous and the synchronous backend, and rescaling.
 */
@Tag("daemon-views")
@ExtendWith(ParameterizedTestExtension.class)
public class StatedAsyncStateTest {
  @RegisterExtension static final TestDaemon DAEMON = TestDaemon.plain();

  @Parameter public String kind;

  @Parameters(name = "kind={0}")
  public static List<String> kinds() {
    return List.of("file", "lsm");
  }

  /**
   * The value cache of the tests that do not choose: on (it is off by default), so that every test
   * goes through it.
   */
  private static final MemorySize CACHE = MemorySize.ofMebiBytes(64);

  private MockEnvironment env;
  private final List<AutoCloseable> toClose = new ArrayList<>();
  private final AtomicReference<Throwable> asyncFailure = new AtomicReference<>();

  /** The metric group of the next backend made (the operator's in Flink). */
  private org.apache.flink.metrics.MetricGroup metrics = new UnregisteredMetricsGroup();

  @BeforeEach
  void before() {
    env = MockEnvironment.builder().build();
  }

  @AfterEach
  void after() {
    Collections.reverse(toClose);
    for (AutoCloseable c : toClose) {
      IOUtils.closeQuietly(c);
    }
    IOUtils.closeQuietly(env);
    assertThat(asyncFailure.get()).as("failure reported to Flink's async framework").isNull();
  }

  private StatedStateBackend stateBackend() {
    return stateBackend(CACHE);
  }

  /** Whether the next backends use the daemon's batch socket (else gRPC). */
  private boolean batchSocket = true;

  /** The filter of new keys of the next backends (on, at its default, unless a test says). */
  private MemorySize newKeyFilter = StatedOptions.ASYNC_NEW_KEY_FILTER_SIZE.defaultValue();

  private StatedStateBackend stateBackend(MemorySize cache) {
    Configuration c = new Configuration();
    c.set(StatedOptions.SOCKET, DAEMON.socket());
    c.set(StatedOptions.BATCH_SOCKET, batchSocket);
    c.set(StatedOptions.BACKEND_KIND, kind);
    c.set(StatedOptions.ASYNC_CACHE_SIZE, cache);
    c.set(StatedOptions.ASYNC_NEW_KEY_FILTER_SIZE, newKeyFilter);
    return new StatedStateBackend().configure(c, getClass().getClassLoader());
  }

  private <K> KeyedStateBackendParametersImpl<K> params(
      org.apache.flink.api.common.typeutils.TypeSerializer<K> keys,
      int maxParallelism,
      KeyGroupRange range,
      List<KeyedStateHandle> handles) {
    return new KeyedStateBackendParametersImpl<>(
        env,
        new JobID(),
        "async_op",
        keys,
        maxParallelism,
        range,
        env.getTaskKvStateRegistry(),
        TtlTimeProvider.DEFAULT,
        metrics,
        (name, value) -> {},
        handles,
        new CloseableRegistry(),
        1.0d);
  }

  /** A backend and the execution controller of an operator on it. */
  private final class Task {
    final AsyncKeyedStateBackend<Integer> backend;
    final StateExecutionController<Integer> aec;
    final StatedAsyncStateExecutor executor;
    final int maxParallelism;
    private final MailboxExecutorImpl mailbox;
    private int records;

    Task(int maxParallelism, KeyGroupRange range, List<KeyedStateHandle> handles, int batchSize)
        throws Exception {
      this(maxParallelism, range, handles, batchSize, CACHE);
    }

    Task(
        int maxParallelism,
        KeyGroupRange range,
        List<KeyedStateHandle> handles,
        int batchSize,
        MemorySize cache)
        throws Exception {
      this.maxParallelism = maxParallelism;
      backend =
          stateBackend(cache)
              .createAsyncKeyedStateBackend(
                  params(IntSerializer.INSTANCE, maxParallelism, range, handles));
      toClose.add(
          () -> {
            backend.close();
            backend.dispose();
          });
      executor = (StatedAsyncStateExecutor) backend.createStateExecutor();
      // The mailbox of this (the test's) thread: callbacks run here while
      // the controller waits, as on a task thread.
      mailbox =
          new MailboxExecutorImpl(new TaskMailboxImpl(), 0, StreamTaskActionExecutor.IMMEDIATE);
      aec =
          new StateExecutionController<>(
              mailbox,
              (message, t) -> asyncFailure.compareAndSet(null, t),
              executor,
              new DeclarationManager(),
              EpochManager.ParallelMode.SERIAL_BETWEEN_EPOCH,
              maxParallelism,
              batchSize,
              -1,
              1000,
              null,
              new UnregisteredMetricsGroup());
      backend.setup(aec);
    }

    /** Runs {@code body} as the processing of one record of {@code key}. */
    void record(int key, Runnable body) {
      RecordContext<Integer> ctx = aec.buildContext("record-" + records++, key);
      ctx.retain();
      aec.setCurrentContext(ctx);
      body.run();
      ctx.release();
    }

    /**
     * Runs {@code body} as the processing of one record of {@code key} once the records of that key
     * before it are done, as Flink's asynchronous operators do ({@code
     * preserveRecordOrderAndProcess}): for records of a key that may still be in flight.
     */
    void recordInOrder(int key, Runnable body) {
      RecordContext<Integer> ctx = aec.buildContext("record-" + records++, key);
      ctx.retain();
      aec.setCurrentContext(ctx);
      aec.syncPointRequestWithCallback(body::run, false);
      ctx.release();
    }

    void drain() {
      aec.drainInflightRecords(0);
    }

    /** Runs the callbacks waiting in the task's mailbox, without waiting for more. */
    void runMail() {
      while (mailbox.tryYield()) {}
    }

    KeyedStateHandle snapshot(long id, Runnable beforeAsyncPart) throws Exception {
      CheckpointStreamFactory streams =
          new JobManagerCheckpointStorage()
              .createCheckpointStorage(new JobID())
              .resolveCheckpointStorageLocation(
                  id, CheckpointStorageLocationReference.getDefault());
      RunnableFuture<SnapshotResult<KeyedStateHandle>> f =
          backend.snapshot(id, 0L, streams, CheckpointOptions.forCheckpointWithDefaultLocation());
      beforeAsyncPart.run();
      if (!f.isDone()) {
        f.run();
      }
      return f.get().getJobManagerOwnedSnapshot();
    }
  }

  private static final class Avg implements AggregateFunction<Integer, Long, Long> {
    private static final long serialVersionUID = 1L;

    @Override
    public Long createAccumulator() {
      return 0L;
    }

    @Override
    public Long add(Integer value, Long acc) {
      return acc + value;
    }

    @Override
    public Long getResult(Long acc) {
      return acc * 10;
    }

    @Override
    public Long merge(Long a, Long b) {
      return a + b;
    }
  }

  private static <S extends org.apache.flink.api.common.state.v2.State> S state(
      Task t, org.apache.flink.api.common.state.v2.StateDescriptor<?> d) throws Exception {
    return t.backend.getOrCreateKeyedState(
        VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, d);
  }

  @TestTemplate
  void everyKindThroughBatches() throws Exception {
    Task t = new Task(128, new KeyGroupRange(0, 127), List.of(), 100);
    ValueState<Integer> v = state(t, new ValueStateDescriptor<>("v", BasicTypeInfo.INT_TYPE_INFO));
    ListState<Integer> l = state(t, new ListStateDescriptor<>("l", BasicTypeInfo.INT_TYPE_INFO));
    MapState<Integer, String> m =
        state(
            t,
            new MapStateDescriptor<>(
                "m", BasicTypeInfo.INT_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO));
    ReducingState<Long> r =
        state(t, new ReducingStateDescriptor<>("r", Long::sum, BasicTypeInfo.LONG_TYPE_INFO));
    AggregatingState<Integer, Long> a =
        state(t, new AggregatingStateDescriptor<>("a", new Avg(), BasicTypeInfo.LONG_TYPE_INFO));
    int keys = 300;
    for (int k = 0; k < keys; k++) {
      int key = k;
      t.record(
          key,
          () -> {
            v.asyncUpdate(key);
            l.asyncAdd(key);
            l.asyncAddAll(List.of(key + 1, key + 2));
            m.asyncPut(key, "x" + key);
            m.asyncPut(-1, null);
            // A reducing or aggregating add reads, then writes in a callback:
            // two adds of one record are chained, or both read the old value
            // (Flink's State V2 semantics, the same on ForSt).
            r.asyncAdd((long) key).thenCompose(x -> r.asyncAdd(1L));
            a.asyncAdd(key).thenCompose(x -> a.asyncAdd(2));
          });
    }
    t.drain();
    Map<Integer, List<Object>> got = new HashMap<>();
    for (int k = 0; k < keys; k++) {
      int key = k;
      List<Object> row = Collections.synchronizedList(new ArrayList<>());
      got.put(key, row);
      t.record(
          key,
          () -> {
            v.asyncValue()
                .thenAccept(x -> row.add(x))
                .thenCompose(x -> l.asyncGet())
                .thenCompose(
                    it -> {
                      List<Integer> items = new ArrayList<>();
                      return it.onNext(
                              (Integer x) -> {
                                items.add(x);
                              })
                          .thenAccept(x -> row.add(items));
                    })
                .thenCompose(x -> m.asyncGet(key))
                .thenAccept(row::add)
                .thenCompose(x -> m.asyncContains(-1))
                .thenAccept(row::add)
                .thenCompose(x -> m.asyncGet(-1))
                .thenAccept(row::add)
                .thenCompose(x -> r.asyncGet())
                .thenAccept(row::add)
                .thenCompose(x -> a.asyncGet())
                .thenAccept(row::add);
          });
    }
    t.drain();
    for (int k = 0; k < keys; k++) {
      assertThat(got.get(k))
          .as("key %d", k)
          .containsExactly(
              k, List.of(k, k + 1, k + 2), "x" + k, true, null, (long) k + 1, (k + 2) * 10L);
    }
    // The synchronous forms go through the same executor.
    t.record(
        5,
        () -> {
          assertThat(v.value()).isEqualTo(5);
          v.update(null);
          assertThat(v.value()).isNull();
          l.update(List.of(9));
          assertThat(l.get()).containsExactly(9);
          l.update(List.of());
          assertThat(l.get()).isEmpty();
          m.remove(5);
          assertThat(m.contains(5)).isFalse();
          assertThat(m.isEmpty()).isFalse();
          m.remove(-1);
          assertThat(m.isEmpty()).isTrue();
          r.clear();
          assertThat(r.get()).isNull();
        });
    t.drain();
  }

  @TestTemplate
  void mapIterationPagesAndPerKeyOrder() throws Exception {
    Task t = new Task(128, new KeyGroupRange(0, 127), List.of(), 1000);
    MapState<Integer, String> m =
        state(
            t,
            new MapStateDescriptor<>(
                "m", BasicTypeInfo.INT_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO));
    ValueState<Integer> v = state(t, new ValueStateDescriptor<>("v", BasicTypeInfo.INT_TYPE_INFO));
    int n = 2 * StatedAsyncStateExecutor.MAP_PAGE + 345;
    Map<Integer, String> big = new HashMap<>();
    for (int i = 0; i < n; i++) {
      big.put(i, "v" + i);
    }
    AtomicInteger entries = new AtomicInteger();
    AtomicInteger keySum = new AtomicInteger();
    AtomicInteger values = new AtomicInteger();
    List<Object> order = Collections.synchronizedList(new ArrayList<>());
    t.record(
        3,
        () -> {
          m.asyncPutAll(big);
          m.asyncEntries()
              .thenCompose(
                  it ->
                      it.onNext(
                          e -> {
                            assertThat(e.getValue()).isEqualTo("v" + e.getKey());
                            entries.incrementAndGet();
                          }));
          m.asyncKeys()
              .thenCompose(
                  it ->
                      it.onNext(
                          (Integer k) -> {
                            keySum.addAndGet(k);
                          }));
          m.asyncValues()
              .thenCompose(
                  it ->
                      it.onNext(
                          (String x) -> {
                            values.incrementAndGet();
                          }));
          // Requests of one key, not waited for, in one batch: applied in order.
          v.asyncUpdate(1);
          v.asyncUpdate(2);
          v.asyncValue().thenAccept(order::add);
          v.asyncClear();
          v.asyncValue().thenAccept(order::add);
          v.asyncUpdate(3);
        });
    t.drain();
    assertThat(entries.get()).isEqualTo(n);
    assertThat(keySum.get()).isEqualTo(n * (n - 1) / 2);
    assertThat(values.get()).isEqualTo(n);
    assertThat(order).containsExactly(2, null);
    t.record(3, () -> assertThat(v.value()).isEqualTo(3));
    t.drain();
  }

  @TestTemplate
  void readsOfOneKeyMergeWithinABatchInOrder() throws Exception {
    // No value cache: its hits would answer the value reads before merging.
    InterceptingOperatorMetricGroup m0 = new InterceptingOperatorMetricGroup();
    metrics = m0;
    Task t = new Task(128, new KeyGroupRange(0, 127), List.of(), 1000, MemorySize.ZERO);
    ValueState<Integer> v = state(t, new ValueStateDescriptor<>("v", BasicTypeInfo.INT_TYPE_INFO));
    ListState<Integer> l = state(t, new ListStateDescriptor<>("l", BasicTypeInfo.INT_TYPE_INFO));
    MapState<Integer, String> m =
        state(
            t,
            new MapStateDescriptor<>(
                "m", BasicTypeInfo.INT_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO));
    t.record(
        7,
        () -> {
          v.asyncUpdate(1);
          l.asyncAdd(1);
          m.asyncPut(1, "x");
        });
    t.record(8, () -> v.asyncUpdate(80));
    t.drain();
    long opsBefore = t.executor.sentOps();
    long mergedBefore = t.executor.mergedReads();
    Map<String, Object> got = Collections.synchronizedMap(new HashMap<>());
    // One batch: requests of one record, not waited for, and a record of another key.
    t.record(
        7,
        () -> {
          v.asyncValue().thenAccept(x -> got.put("v0", x));
          v.asyncValue().thenAccept(x -> got.put("v1", x));
          v.asyncUpdate(2);
          v.asyncValue().thenAccept(x -> got.put("v2", x));
          v.asyncValue().thenAccept(x -> got.put("v3", x));
          l.asyncGet().thenCompose(it -> collect(it, got, "l0"));
          l.asyncAdd(2);
          l.asyncGet().thenCompose(it -> collect(it, got, "l1"));
          l.asyncGet().thenCompose(it -> collect(it, got, "l2"));
          m.asyncGet(1).thenAccept(x -> got.put("m0", x));
          m.asyncGet(1).thenAccept(x -> got.put("m1", x));
          m.asyncGet(2).thenAccept(x -> got.put("m2", x));
          m.asyncPut(1, "y");
          m.asyncGet(1).thenAccept(x -> got.put("m3", x));
          // Another state's write leaves this state's reads merged.
          v.asyncValue().thenAccept(x -> got.put("v4", x));
        });
    t.record(8, () -> v.asyncValue().thenAccept(x -> got.put("other key", x)));
    t.drain();
    assertThat(got)
        .containsEntry("v0", 1)
        .containsEntry("v1", 1)
        .containsEntry("v2", 2)
        .containsEntry("v3", 2)
        .containsEntry("v4", 2)
        .containsEntry("l0", List.of(1))
        .containsEntry("l1", List.of(1, 2))
        .containsEntry("l2", List.of(1, 2))
        .containsEntry("m0", "x")
        .containsEntry("m1", "x")
        .containsEntry("m2", null)
        .containsEntry("m3", "y")
        .containsEntry("other key", 80)
        .hasSize(13);
    // Merged: v1 into v0, v3 and v4 into v2, l2 into l1, m1 into m0.
    assertThat(t.executor.mergedReads() - mergedBefore).as("reads merged").isEqualTo(5);
    assertThat(t.executor.sentOps() - opsBefore).as("operations sent").isEqualTo(16 - 5);
    // The executor's metrics count what it sent; every batch is answered once its writes are.
    t.executor.awaitWrites();
    long batches = ((Counter) m0.get(StatedAsyncStateExecutor.METRIC_BATCHES)).getCount();
    assertThat(batches).as("batches").isBetween(2L, 4L);
    assertThat(((Counter) m0.get(StatedAsyncStateExecutor.METRIC_OPERATIONS)).getCount())
        .as("operations metric")
        .isEqualTo(t.executor.sentOps());
    assertThat(((Histogram) m0.get(StatedAsyncStateExecutor.METRIC_ROUND_TRIP)).getCount())
        .as("round trips recorded")
        .isEqualTo(batches);
  }

  /**
   * The value cache against a model: random unchained gets, updates, clears and reducing adds of
   * 100 keys in batches of 7, up to 1000 records in flight (a record of a key starts when the one
   * before it is done, as in Flink's operators), through a cache that holds about an eighth of the
   * addresses. Every get must see the model's value at the point it was issued: an answer that came
   * back after a later write of its key must not overwrite that write in the cache. The daemon must
   * hold what the model does (the dirty entries evicted meanwhile and flushed by the snapshot),
   * read back through a snapshot by a backend without a cache; and the cache must have answered
   * gets and stayed within its bytes.
   */
  @TestTemplate
  void valueCacheAnswersGetsAndStaysCoherent() throws Exception {
    int keys = 100;
    long capacity = 25 * (AsyncValueCache.ENTRY_OVERHEAD + 16);
    Task t =
        new Task(128, new KeyGroupRange(0, 127), List.of(), 7, MemorySize.parse(capacity + "b"));
    ValueState<Integer> v = state(t, new ValueStateDescriptor<>("v", BasicTypeInfo.INT_TYPE_INFO));
    ReducingState<Long> r =
        state(t, new ReducingStateDescriptor<>("r", Long::sum, BasicTypeInfo.LONG_TYPE_INFO));
    Integer[] modelV = new Integer[keys];
    Long[] modelR = new Long[keys];
    List<String> wrong = Collections.synchronizedList(new ArrayList<>());
    AtomicInteger checked = new AtomicInteger();
    java.util.Random rnd = new java.util.Random(34);
    for (int round = 0; round < 3000; round++) {
      int key = rnd.nextInt(keys);
      int ops = 1 + rnd.nextInt(5);
      // Drawn here, not in the body, so a run is the same whatever order
      // the records of different keys run in.
      int[] what = new int[ops];
      int[] arg = new int[ops];
      for (int i = 0; i < ops; i++) {
        what[i] = rnd.nextInt(10);
        arg[i] = rnd.nextInt(1000);
      }
      String record = "record " + round + " (key " + key + ")";
      t.recordInOrder(
          key,
          () -> {
            for (int i = 0; i < ops; i++) {
              if (what[i] < 4) {
                Integer want = modelV[key];
                String at = "get " + i + " of " + record;
                v.asyncValue()
                    .thenAccept(
                        x -> {
                          checked.incrementAndGet();
                          if (!java.util.Objects.equals(x, want)) {
                            wrong.add(at + ": got " + x + ", want " + want);
                          }
                        });
              } else if (what[i] < 7) {
                modelV[key] = arg[i];
                v.asyncUpdate(arg[i]);
              } else if (what[i] < 8) {
                modelV[key] = null;
                v.asyncClear();
              } else if (i == ops - 1) {
                // One add per record: two unchained adds both read the old sum.
                long x = arg[i];
                modelR[key] = modelR[key] == null ? x : modelR[key] + x;
                r.asyncAdd(x);
              }
            }
          });
    }
    t.drain();
    assertThat(wrong).as("gets that did not see the writes before them").isEmpty();
    assertThat(checked.get()).as("gets checked").isGreaterThan(2000);
    AsyncValueCache cache = t.executor.cache();
    assertThat(cache.hits()).as("gets the cache answered").isGreaterThan(500);
    assertThat(cache.misses()).as("gets sent to the daemon").isGreaterThan(100);
    assertThat(cache.bytes()).as("cache bytes").isLessThanOrEqualTo(capacity);
    assertThat(cache.entries()).as("cache entries").isLessThan(2 * keys).isGreaterThan(5);

    KeyedStateHandle h = t.snapshot(1, () -> {});
    Task back = new Task(128, new KeyGroupRange(0, 127), List.of(h), 50, MemorySize.ZERO);
    ValueState<Integer> v2 =
        state(back, new ValueStateDescriptor<>("v", BasicTypeInfo.INT_TYPE_INFO));
    ReducingState<Long> r2 =
        state(back, new ReducingStateDescriptor<>("r", Long::sum, BasicTypeInfo.LONG_TYPE_INFO));
    Map<Integer, List<Object>> got = new HashMap<>();
    for (int k = 0; k < keys; k++) {
      int key = k;
      List<Object> row = Collections.synchronizedList(new ArrayList<>());
      got.put(key, row);
      back.record(
          key,
          () ->
              v2.asyncValue()
                  .thenAccept(row::add)
                  .thenCompose(x -> r2.asyncGet())
                  .thenAccept(row::add));
    }
    back.drain();
    assertThat(back.executor.cache().hits()).as("no cache on the reading backend").isZero();
    for (int k = 0; k < keys; k++) {
      assertThat(got.get(k))
          .as("daemon's state of key %d", k)
          .containsExactly(modelV[k], modelR[k]);
    }
  }

  @TestTemplate
  void cachedGetCompletesWhenSentNotWhenAnswered() throws Exception {
    // Without the filter of new keys, which would answer key 3 too.
    newKeyFilter = MemorySize.ZERO;
    // Batch size 2: the second request of each pair sends the batch.
    Task t = new Task(128, new KeyGroupRange(0, 127), List.of(), 2, MemorySize.parse("1m"));
    ValueState<Integer> v = state(t, new ValueStateDescriptor<>("v", BasicTypeInfo.INT_TYPE_INFO));
    t.record(1, () -> v.asyncUpdate(11));
    t.record(2, () -> v.asyncUpdate(22));
    t.drain();
    List<String> got = Collections.synchronizedList(new ArrayList<>());
    DAEMON.daemon().pause();
    try {
      // Key 1's value is in the cache (its write); key 3 is not: its get
      // needs the daemon, which answers nothing while paused.
      t.record(1, () -> v.asyncValue().thenAccept(x -> got.add("1=" + x)));
      t.record(3, () -> v.asyncValue().thenAccept(x -> got.add("3=" + x)));
      t.runMail();
      assertThat(got).as("gets completed while the daemon was paused").containsExactly("1=11");
    } finally {
      DAEMON.daemon().resume();
    }
    t.drain();
    assertThat(got).as("gets completed").containsExactly("1=11", "3=null");
    assertThat(t.executor.cache().hits()).as("gets the cache answered").isEqualTo(1);
  }

  @TestTemplate
  void cachedWritesOfAHotKeyReachTheDaemonOncePerSnapshot() throws Exception {
    // Without the filter of new keys: the first get is the daemon's.
    newKeyFilter = MemorySize.ZERO;
    Task t = new Task(128, new KeyGroupRange(0, 127), List.of(), 10, MemorySize.parse("1m"));
    ValueState<Integer> v = state(t, new ValueStateDescriptor<>("v", BasicTypeInfo.INT_TYPE_INFO));
    for (int i = 1; i <= 1000; i++) {
      int n = i;
      t.recordInOrder(7, () -> v.asyncValue().thenAccept(x -> v.asyncUpdate(n)));
    }
    t.drain();
    assertThat(t.executor.sentOps()).as("operations sent before the snapshot").isEqualTo(1);
    KeyedStateHandle h = t.snapshot(1, () -> {});
    assertThat(t.executor.sentOps()).as("operations sent with the snapshot").isEqualTo(2);
    assertThat(t.executor.cache().dirtyEntries()).as("dirty after the snapshot").isZero();
    Task back = new Task(128, new KeyGroupRange(0, 127), List.of(h), 10, MemorySize.ZERO);
    ValueState<Integer> v2 =
        state(back, new ValueStateDescriptor<>("v", BasicTypeInfo.INT_TYPE_INFO));
    AtomicInteger got = new AtomicInteger();
    back.record(7, () -> v2.asyncValue().thenAccept(got::set));
    back.drain();
    assertThat(got).as("the restored value: the last write").hasValue(1000);
  }

  /**
   * The filter of new keys: on a fresh backend, reads of addresses never written (every read
   * request type) are answered without a daemon operation, with what the daemon would answer; once
   * written, an address is read from the daemon. A restored state is not filtered: its reads go to
   * the daemon (and find what the checkpoint holds), while a state registered fresh on the restored
   * backend is. With the filter off (0) every read is sent.
   */
  @TestTemplate
  void readsOfNewKeysAreAnsweredWithoutTheDaemon() throws Exception {
    InterceptingOperatorMetricGroup m0 = new InterceptingOperatorMetricGroup();
    metrics = m0;
    Task t = new Task(128, new KeyGroupRange(0, 127), List.of(), 50, MemorySize.ZERO);
    ValueStateDescriptor<Integer> vd = new ValueStateDescriptor<>("v", BasicTypeInfo.INT_TYPE_INFO);
    ListStateDescriptor<Integer> ld = new ListStateDescriptor<>("l", BasicTypeInfo.INT_TYPE_INFO);
    MapStateDescriptor<Integer, String> md =
        new MapStateDescriptor<>("m", BasicTypeInfo.INT_TYPE_INFO, BasicTypeInfo.STRING_TYPE_INFO);
    ValueState<Integer> v = state(t, vd);
    ListState<Integer> l = state(t, ld);
    MapState<Integer, String> m = state(t, md);
    int keys = 100;
    // Each record reads its key's six ways, then writes it (even keys only).
    Map<String, Object> got = Collections.synchronizedMap(new HashMap<>());
    for (int k = 0; k < keys; k++) {
      int key = k;
      t.record(
          key,
          () -> {
            v.asyncValue().thenAccept(x -> got.put("v" + key, x));
            l.asyncGet().thenCompose(it -> collect(it, got, "l" + key));
            m.asyncGet(1).thenAccept(x -> got.put("m" + key, x));
            m.asyncContains(1).thenAccept(x -> got.put("c" + key, x));
            m.asyncIsEmpty().thenAccept(x -> got.put("e" + key, x));
            m.asyncKeys()
                .thenCompose(
                    it -> {
                      List<Integer> ks = Collections.synchronizedList(new ArrayList<>());
                      return it.onNext((Integer x) -> ks.add(x))
                          .thenAccept(x -> got.put("k" + key, ks));
                    });
            if (key % 2 == 0) {
              v.asyncUpdate(key);
              l.asyncAdd(key);
              m.asyncPut(1, "x" + key);
            }
          });
    }
    t.drain();
    for (int k = 0; k < keys; k++) {
      assertThat(got.get("v" + k)).as("value of new key %d", k).isNull();
      assertThat(got.get("l" + k)).as("list of new key %d", k).isEqualTo(List.of());
      assertThat(got.get("m" + k)).as("map get of new key %d", k).isNull();
      assertThat(got.get("c" + k)).as("map contains of new key %d", k).isEqualTo(false);
      assertThat(got.get("e" + k)).as("map is empty of new key %d", k).isEqualTo(true);
      assertThat(got.get("k" + k)).as("map keys of new key %d", k).isEqualTo(List.of());
    }
    long writes = 3L * keys / 2;
    assertThat(t.executor.sentOps()).as("operations sent: the writes only").isEqualTo(writes);
    assertThat(t.executor.written().answers()).as("reads the filter answered").isEqualTo(6L * keys);
    assertThat(((Counter) m0.get(StatedAsyncStateExecutor.METRIC_NEW_KEY_ANSWERS)).getCount())
        .as("the filter's metric")
        .isEqualTo(6L * keys);

    // Written addresses are read from the daemon; the others are still known absent.
    got.clear();
    for (int k = 0; k < keys; k++) {
      int key = k;
      t.record(
          key,
          () -> {
            v.asyncValue().thenAccept(x -> got.put("v" + key, x));
            l.asyncGet().thenCompose(it -> collect(it, got, "l" + key));
            m.asyncGet(1).thenAccept(x -> got.put("m" + key, x));
          });
    }
    t.drain();
    for (int k = 0; k < keys; k++) {
      boolean w = k % 2 == 0;
      assertThat(got.get("v" + k)).as("value of key %d", k).isEqualTo(w ? k : null);
      assertThat(got.get("l" + k)).as("list of key %d", k).isEqualTo(w ? List.of(k) : List.of());
      assertThat(got.get("m" + k)).as("map get of key %d", k).isEqualTo(w ? "x" + k : null);
    }
    assertThat(t.executor.sentOps() - writes).as("reads sent").isEqualTo(3L * keys / 2);

    // Restored: the states are the checkpoint's, never filtered; a new state is.
    KeyedStateHandle h = t.snapshot(1, () -> {});
    Task back = new Task(128, new KeyGroupRange(0, 127), List.of(h), 50, MemorySize.ZERO);
    ValueState<Integer> v2 = state(back, vd);
    ValueState<Integer> fresh =
        state(back, new ValueStateDescriptor<>("fresh", BasicTypeInfo.INT_TYPE_INFO));
    got.clear();
    for (int k = 0; k < keys; k++) {
      int key = k;
      back.record(
          key,
          () -> {
            v2.asyncValue().thenAccept(x -> got.put("v" + key, x));
            fresh.asyncValue().thenAccept(x -> got.put("f" + key, x));
          });
    }
    back.drain();
    for (int k = 0; k < keys; k++) {
      assertThat(got.get("v" + k))
          .as("restored value of key %d", k)
          .isEqualTo(k % 2 == 0 ? k : null);
      assertThat(got.get("f" + k)).as("new state's value of key %d", k).isNull();
    }
    assertThat(back.executor.sentOps()).as("restored backend's reads sent").isEqualTo(keys);
    assertThat(back.executor.written().answers()).as("the new state's reads").isEqualTo(keys);

    // Off: every read is sent.
    newKeyFilter = MemorySize.ZERO;
    Task off = new Task(128, new KeyGroupRange(0, 127), List.of(), 50, MemorySize.ZERO);
    ValueState<Integer> v3 = state(off, vd);
    for (int k = 0; k < keys; k++) {
      off.record(k, () -> v3.asyncValue());
    }
    off.drain();
    assertThat(off.executor.written().enabled()).as("filter of size 0").isFalse();
    assertThat(off.executor.sentOps()).as("reads sent without the filter").isEqualTo(keys);
  }

  /** Reads value state {@code d} of {@code keys} keys through {@code t}, key by key. */
  private static Integer[] readAll(Task t, ValueStateDescriptor<Integer> d, int keys, int[] only)
      throws Exception {
    ValueState<Integer> v = state(t, d);
    Integer[] got = new Integer[keys];
    for (int key : only) {
      t.recordInOrder(key, () -> v.asyncValue().thenAccept(x -> got[key] = x));
    }
    t.drain();
    return got;
  }

  /** Writes {@code base + key} to value state {@code d} of the given keys through {@code t}. */
  private static void writeAll(Task t, ValueStateDescriptor<Integer> d, int base, int[] only)
      throws Exception {
    ValueState<Integer> v = state(t, d);
    for (int key : only) {
      t.recordInOrder(key, () -> v.asyncUpdate(base + key));
    }
    t.drain();
  }

  /**
   * The value cache across a checkpoint, a restore and a change of key groups: each backend has its
   * own cache, written through, so writes after a checkpoint show on the backend that made them and
   * not on backends restored from the checkpoint, which then see their own writes; and the second
   * restore, of two halves into one, sees the halves' last writes. Every read is checked, and each
   * cached backend must have answered reads from its cache.
   */
  @TestTemplate
  void valueCacheAcrossCheckpointRestoreAndRescale() throws Exception {
    int max = 128;
    int keys = 200;
    int[] all = java.util.stream.IntStream.range(0, keys).toArray();
    KeyGroupRange low = new KeyGroupRange(0, 63);
    KeyGroupRange high = new KeyGroupRange(64, 127);
    int[] lowKeys =
        java.util.stream.IntStream.range(0, keys)
            .filter(k -> low.contains(KeyGroupRangeAssignment.assignToKeyGroup(k, max)))
            .toArray();
    int[] highKeys =
        java.util.stream.IntStream.range(0, keys)
            .filter(k -> high.contains(KeyGroupRangeAssignment.assignToKeyGroup(k, max)))
            .toArray();
    assertThat(lowKeys.length).isBetween(50, 150);
    ValueStateDescriptor<Integer> d = new ValueStateDescriptor<>("v", BasicTypeInfo.INT_TYPE_INFO);

    Task t = new Task(max, new KeyGroupRange(0, max - 1), List.of(), 20);
    writeAll(t, d, 0, all);
    assertThat(readAll(t, d, keys, all)).as("written").isEqualTo(expected(keys, 0, all));
    KeyedStateHandle first = t.snapshot(1, () -> {});
    writeAll(t, d, 1000, all);
    assertThat(readAll(t, d, keys, all))
        .as("written after the checkpoint")
        .isEqualTo(expected(keys, 1000, all));
    assertThat(t.executor.cache().hits())
        .as("reads the first backend's cache answered")
        .isPositive();

    Task a = new Task(max, low, List.of(first), 20);
    Task b = new Task(max, high, List.of(first), 20);
    assertThat(readAll(a, d, keys, lowKeys))
        .as("low half restored from the checkpoint")
        .isEqualTo(expected(keys, 0, lowKeys));
    assertThat(readAll(b, d, keys, highKeys))
        .as("high half restored from the checkpoint")
        .isEqualTo(expected(keys, 0, highKeys));
    writeAll(a, d, 2000, lowKeys);
    writeAll(b, d, 3000, highKeys);
    assertThat(readAll(a, d, keys, lowKeys)).isEqualTo(expected(keys, 2000, lowKeys));
    assertThat(readAll(b, d, keys, highKeys)).isEqualTo(expected(keys, 3000, highKeys));
    assertThat(a.executor.cache().hits()).as("reads the low half's cache answered").isPositive();
    assertThat(b.executor.cache().hits()).as("reads the high half's cache answered").isPositive();
    // The first backend still has its own writes.
    assertThat(readAll(t, d, keys, all)).isEqualTo(expected(keys, 1000, all));

    KeyedStateHandle ha = a.snapshot(2, () -> {});
    KeyedStateHandle hb = b.snapshot(2, () -> {});
    Task one = new Task(max, new KeyGroupRange(0, max - 1), List.of(ha, hb), 20);
    Integer[] want = expected(keys, 2000, lowKeys);
    for (int k : highKeys) {
      want[k] = 3000 + k;
    }
    assertThat(readAll(one, d, keys, all)).as("the halves joined").isEqualTo(want);
  }

  /** {@code base + key} for the given keys, null for the others. */
  private static Integer[] expected(int keys, int base, int[] only) {
    Integer[] want = new Integer[keys];
    for (int k : only) {
      want[k] = base + k;
    }
    return want;
  }

  private static org.apache.flink.api.common.state.v2.StateFuture<Void> collect(
      org.apache.flink.api.common.state.v2.StateIterator<Integer> it,
      Map<String, Object> into,
      String name) {
    List<Integer> items = Collections.synchronizedList(new ArrayList<>());
    return it.onNext(
            (Integer x) -> {
              items.add(x);
            })
        .thenAccept(x -> into.put(name, items));
  }

  @TestTemplate
  void listMergesNamespaces() throws Exception {
    Task t = new Task(128, new KeyGroupRange(0, 127), List.of(), 10);
    InternalListState<Integer, String, Integer> l =
        t.backend.createStateInternal(
            "w", StringSerializer.INSTANCE, new ListStateDescriptor<>("l", IntSerializer.INSTANCE));
    List<Integer> target = new ArrayList<>();
    List<Integer> source = new ArrayList<>();
    t.record(
        1,
        () -> {
          l.setCurrentNamespace("a");
          l.asyncAdd(1);
          l.setCurrentNamespace("b");
          l.asyncAddAll(List.of(2, 3));
          l.setCurrentNamespace("t");
          l.asyncAdd(0);
          l.asyncMergeNamespaces("t", List.of("a", "b"))
              .thenCompose(
                  x -> {
                    l.setCurrentNamespace("t");
                    return l.asyncGet();
                  })
              .thenCompose(
                  it ->
                      it.onNext(
                          (Integer x) -> {
                            target.add(x);
                          }))
              .thenCompose(
                  x -> {
                    l.setCurrentNamespace("b");
                    return l.asyncGet();
                  })
              .thenCompose(
                  it ->
                      it.onNext(
                          (Integer x) -> {
                            source.add(x);
                          }));
        });
    t.drain();
    assertThat(target).containsExactlyInAnyOrder(0, 1, 2, 3);
    assertThat(source).isEmpty();
  }

  @TestTemplate
  void snapshotHoldsRequestsInFlightAndRestoresEitherWay() throws Exception {
    // Batch size 1: each request is sent as soon as it is made, and the
    // snapshot comes right after, with requests unanswered.
    Task t = new Task(128, new KeyGroupRange(0, 127), List.of(), 1);
    ValueState<Integer> v = state(t, new ValueStateDescriptor<>("v", BasicTypeInfo.INT_TYPE_INFO));
    MapState<Integer, Long> m =
        state(
            t,
            new MapStateDescriptor<>(
                "m", BasicTypeInfo.INT_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO));
    int keys = 200;
    for (int k = 0; k < keys; k++) {
      int key = k;
      t.record(
          key,
          () -> {
            v.asyncUpdate(key);
            m.asyncPut(key, (long) key * 7);
          });
    }
    KeyedStateHandle h =
        t.snapshot(
            1,
            () -> {
              // Written after the barrier, before the snapshot is read: not in it.
              for (int k = 0; k < keys; k++) {
                int key = k;
                t.record(key, () -> v.asyncUpdate(-key - 1));
              }
              t.drain();
            });
    assertThat(h).isNotNull();

    Task back = new Task(128, new KeyGroupRange(0, 127), List.of(h), 50);
    ValueState<Integer> v2 =
        state(back, new ValueStateDescriptor<>("v", BasicTypeInfo.INT_TYPE_INFO));
    MapState<Integer, Long> m2 =
        state(
            back,
            new MapStateDescriptor<>(
                "m", BasicTypeInfo.INT_TYPE_INFO, BasicTypeInfo.LONG_TYPE_INFO));
    int[] vs = new int[keys];
    long[] ms = new long[keys];
    for (int k = 0; k < keys; k++) {
      int key = k;
      back.record(
          key,
          () -> {
            v2.asyncValue().thenAccept(x -> vs[key] = x);
            m2.asyncGet(key).thenAccept(x -> ms[key] = x);
          });
    }
    back.drain();
    for (int k = 0; k < keys; k++) {
      assertThat(vs[k]).as("value of key %d", k).isEqualTo(k);
      assertThat(ms[k]).as("map of key %d", k).isEqualTo(k * 7L);
    }

    // The synchronous backend restores the same handle.
    org.apache.flink.runtime.state.AbstractKeyedStateBackend<Integer> sync =
        stateBackend()
            .createKeyedStateBackend(
                params(IntSerializer.INSTANCE, 128, new KeyGroupRange(0, 127), List.of(h)));
    toClose.add(
        () -> {
          sync.close();
          sync.dispose();
        });
    org.apache.flink.api.common.state.ValueState<Integer> sv =
        sync.getPartitionedState(
            VoidNamespace.INSTANCE,
            VoidNamespaceSerializer.INSTANCE,
            new org.apache.flink.api.common.state.ValueStateDescriptor<>(
                "v", IntSerializer.INSTANCE));
    org.apache.flink.api.common.state.MapState<Integer, Long> sm =
        sync.getPartitionedState(
            VoidNamespace.INSTANCE,
            VoidNamespaceSerializer.INSTANCE,
            new org.apache.flink.api.common.state.MapStateDescriptor<>(
                "m", IntSerializer.INSTANCE, LongSerializer.INSTANCE));
    for (int k = 0; k < keys; k++) {
      sync.setCurrentKey(k);
      assertThat(sv.value()).isEqualTo(k);
      assertThat(sm.get(k)).isEqualTo(k * 7L);
    }
  }

  /**
   * Writes complete when they are sent (write-behind), so one the daemon refuses (here a value over
   * its 4 MiB --max-value-size) cannot fail its own future: it must fail the next snapshot, naming
   * the request, the state and the daemon's reason, and every later request, so that no checkpoint
   * completes without it.
   */
  @TestTemplate
  void refusedWriteFailsTheSnapshotAndLaterRequests() throws Exception {
    // Without the value cache the write is sent at once; with it (64 MiB,
    // the 5 MiB value fits) it is written back when the snapshot flushes.
    refusedWrite(MemorySize.ZERO, "refused VALUE_UPDATE of state big");
    refusedWrite(CACHE, "refused the write of state big that the asynchronous value cache held");
  }

  /** A value state of byte arrays named "big", for values over the daemon's limit. */
  private static ValueState<byte[]> bigState(Task t) throws Exception {
    return state(
        t,
        new ValueStateDescriptor<>(
            "big",
            org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo
                .BYTE_PRIMITIVE_ARRAY_TYPE_INFO));
  }

  private void refusedWrite(MemorySize cache, String refusal) throws Exception {
    // Batch size 1: each request is sent as it is made (the failing one below
    // fails there; a failed record never ends, so it is not drained).
    Task t = new Task(128, new KeyGroupRange(0, 127), List.of(), 1, cache);
    ValueState<byte[]> big = bigState(t);
    ValueState<Integer> v = state(t, new ValueStateDescriptor<>("v", BasicTypeInfo.INT_TYPE_INFO));
    AtomicInteger completed = new AtomicInteger();
    t.record(1, () -> v.asyncUpdate(10).thenAccept(x -> completed.incrementAndGet()));
    t.record(
        2, () -> big.asyncUpdate(new byte[5 << 20]).thenAccept(x -> completed.incrementAndGet()));
    t.drain();
    assertThat(completed).as("both writes completed (when sent)").hasValue(2);
    assertThat(asyncFailure.get()).as("no request failed").isNull();

    org.assertj.core.api.Assertions.assertThatThrownBy(() -> t.snapshot(1, () -> {}))
        .hasMessageContaining("no snapshot")
        .hasMessageContaining(refusal)
        .hasMessageContaining("--max-value-size");

    t.record(1, () -> v.asyncValue());
    assertThat(asyncFailure.get())
        .as("a request after the refused write")
        .isNotNull()
        .hasMessageContaining(refusal);
    // Reported as expected: after() checks that nothing else was.
    asyncFailure.set(null);
  }

  /**
   * A batch that sends nothing (here a get the cache answers) after a write still unanswered must
   * not let the next snapshot pass before that write's answer: the daemon, paused, refuses it only
   * after the snapshot has begun.
   */
  @TestTemplate
  void snapshotWaitsForAWriteSentBeforeABatchThatSentNothing() throws Exception {
    // On gRPC, whose sends do not wait for the paused daemon (a send on
    // the batch socket waits until the daemon reads it), so that the
    // refusal is certain to arrive after the snapshot began.
    batchSocket = false;
    Task t = new Task(128, new KeyGroupRange(0, 127), List.of(), 1, MemorySize.parse("1m"));
    ValueState<byte[]> big = bigState(t);
    ValueState<Integer> v = state(t, new ValueStateDescriptor<>("v", BasicTypeInfo.INT_TYPE_INFO));
    t.record(1, () -> v.asyncUpdate(10));
    t.snapshot(1, () -> {});
    DAEMON.daemon().pause();
    Thread resume =
        new Thread(
            () -> {
              try {
                Thread.sleep(500);
                DAEMON.daemon().resume();
              } catch (Exception e) {
                throw new IllegalStateException(e);
              }
            });
    try {
      // Over the cache's size: sent at once, and over the daemon's limit.
      t.record(2, () -> big.asyncUpdate(new byte[5 << 20]));
      t.record(1, () -> v.asyncValue());
      assertThat(t.executor.cache().hits()).as("the get the cache answered").isEqualTo(1);
      resume.start();
      org.assertj.core.api.Assertions.assertThatThrownBy(() -> t.snapshot(2, () -> {}))
          .hasMessageContaining("no snapshot")
          .hasMessageContaining("refused VALUE_UPDATE of state big");
    } finally {
      resume.join();
      DAEMON.daemon().resume();
    }
  }

  @TestTemplate
  void rescale() throws Exception {
    int max = 16;
    KeyGroupRange low = new KeyGroupRange(0, 7);
    KeyGroupRange high = new KeyGroupRange(8, 15);
    Task a = new Task(max, low, List.of(), 20);
    Task b = new Task(max, high, List.of(), 20);
    ValueStateDescriptor<Integer> d = new ValueStateDescriptor<>("v", BasicTypeInfo.INT_TYPE_INFO);
    ValueState<Integer> va = state(a, d);
    ValueState<Integer> vb = state(b, new ValueStateDescriptor<>("v", BasicTypeInfo.INT_TYPE_INFO));
    int keys = 300;
    for (int k = 0; k < keys; k++) {
      int key = k;
      if (low.contains(KeyGroupRangeAssignment.assignToKeyGroup(key, max))) {
        a.record(key, () -> va.asyncUpdate(key * 3));
      } else {
        b.record(key, () -> vb.asyncUpdate(key * 3));
      }
    }
    a.drain();
    b.drain();
    KeyedStateHandle ha = a.snapshot(1, () -> {});
    KeyedStateHandle hb = b.snapshot(1, () -> {});
    Task all = new Task(max, new KeyGroupRange(0, 15), List.of(ha, hb), 20);
    ValueState<Integer> v =
        state(all, new ValueStateDescriptor<>("v", BasicTypeInfo.INT_TYPE_INFO));
    int[] got = new int[keys];
    for (int k = 0; k < keys; k++) {
      int key = k;
      all.record(key, () -> v.asyncValue().thenAccept(x -> got[key] = x));
    }
    all.drain();
    for (int k = 0; k < keys; k++) {
      assertThat(got[k]).as("key %d", k).isEqualTo(k * 3);
    }
  }
}
