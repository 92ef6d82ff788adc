package io.stated.flink.jobs;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.AggregatingState;
import org.apache.flink.api.common.state.AggregatingStateDescriptor;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ReducingState;
import org.apache.flink.api.common.state.ReducingStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.connector.datagen.source.GeneratorFunction;
import org.apache.flink.core.execution.RecoveryClaimMode;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.jobgraph.SavepointRestoreSettings;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.test.junit5.InjectMiniCluster;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.apache.flink.util.Collector;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * A keyed job with every keyed state kind (value, list, map, reducing, aggregating) and event-time
 * timers, rescaled twice through canonical savepoints: started at parallelism 2, stopped with a
 * savepoint, restored at 3, stopped with a second savepoint, restored at 1 and run to the end. The
 * three runs' outputs together must equal the output computed without Flink, line for line: a state
 * or a pending timer that a rescale lost, split wrongly or restored twice shows as a missing, wrong
 * or repeated line. (Flink's own rescaling ITCases are package-private in 2.3.0 and cannot be
 * subclassed.)
 *
 * <p>Each key gets a bucket timer at the end of every {@value #BUCKET_MS} ms of event time it has
 * events in, which emits the bucket's count (map state, then removed) and the sum of its values
 * (list state, then trimmed), and an end-of-input timer, which emits the key's count (value), sum
 * (reducing), maximum (aggregating) and what list and map state still hold (nothing, when every
 * bucket timer fired).
 */
@Timeout(value = 4, unit = TimeUnit.MINUTES)
class RescaleChainITCase {
  static final int EVENTS = 12_000;
  static final int KEYS = 24;
  static final long BUCKET_MS = 500;

  /** Events the source emits per completed checkpoint: every run spans many checkpoints. */
  static final int PER_CHECKPOINT = 400;

  private static final Duration JOB_TIMEOUT = Duration.ofMinutes(2);
  private static final ConcurrentHashMap<String, ConcurrentLinkedQueue<String>> OUTPUT =
      new ConcurrentHashMap<>();

  @RegisterExtension
  static final MiniClusterExtension CLUSTER =
      new MiniClusterExtension(
          new MiniClusterResourceConfiguration.Builder()
              .setConfiguration(clusterConfig())
              .setNumberTaskManagers(2)
              .setNumberSlotsPerTaskManager(2)
              .build());

  @TempDir static Path tmp;

  private static List<String> expected;

  private static Configuration clusterConfig() {
    Configuration c = new Configuration();
    c.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, MemorySize.ofMebiBytes(128));
    return c;
  }

  @BeforeAll
  static void setUp() {
    System.out.println("RescaleChainITCase: " + Backends.statedStatus());
    expected = model();
  }

  static Stream<Backends.Backend> backends() {
    return Backends.with(Backends.HASHMAP, Backends.ROCKSDB).stream();
  }

  /** The job's output, computed without Flink. */
  static List<String> model() {
    List<String> out = new ArrayList<>();
    for (long k = 0; k < KEYS; k++) {
      Map<Long, long[]> buckets = new TreeMap<>();
      long count = 0;
      long sum = 0;
      long max = Long.MIN_VALUE;
      for (long v = k; v < EVENTS; v += KEYS) {
        long[] b = buckets.computeIfAbsent(v / BUCKET_MS, x -> new long[2]);
        b[0]++;
        b[1] += v;
        count++;
        sum += v;
        max = Math.max(max, v);
      }
      for (Map.Entry<Long, long[]> b : buckets.entrySet()) {
        out.add(bucketLine(k, b.getKey(), b.getValue()[0], b.getValue()[1]));
      }
      out.add(finalLine(k, count, sum, max, 0, 0));
    }
    Collections.sort(out);
    return out;
  }

  static String bucketLine(long key, long bucket, long count, long listSum) {
    return "bucket key=" + key + " bucket=" + bucket + " count=" + count + " sum=" + listSum;
  }

  static String finalLine(long key, long count, long sum, long max, int listLeft, int mapLeft) {
    return "final key="
        + key
        + " count="
        + count
        + " sum="
        + sum
        + " max="
        + max
        + " list-left="
        + listLeft
        + " map-left="
        + mapLeft;
  }

  @Test
  void modelIsNotTrivial() {
    assertThat(expected.stream().filter(l -> l.startsWith("final"))).hasSize(KEYS);
    assertThat(expected.stream().filter(l -> l.startsWith("bucket")))
        .hasSize(KEYS * (int) (EVENTS / BUCKET_MS));
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("backends")
  void rescaleTwoThreeOneThroughSavepoints(
      Backends.Backend backend, @InjectMiniCluster MiniCluster cluster) throws Exception {
    List<String> names = new ArrayList<>();
    String savepoint = null;
    for (int parallelism : new int[] {2, 3, 1}) {
      String name = "rescale-" + UUID.randomUUID();
      names.add(name);
      JobID job = submit(cluster, backend, parallelism, name, savepoint);
      if (parallelism == 1) {
        awaitSuccess(cluster, job);
        assertBackend(cluster, job, backend, parallelism);
        break;
      }
      // Mid-stream: a few checkpoints done and some bucket timers fired, so that
      // the savepoint holds state of every kind and timers still pending.
      MiniClusterJobs.awaitCompletedCheckpoints(cluster, job, 2, JOB_TIMEOUT);
      long deadline = System.nanoTime() + JOB_TIMEOUT.toNanos();
      while (output(name).size() < 2 * KEYS) {
        assertThat(System.nanoTime())
            .as("output of the run at " + parallelism)
            .isLessThan(deadline);
        Thread.sleep(10);
      }
      savepoint =
          cluster
              .stopWithSavepoint(
                  job,
                  tmp.resolve("savepoints").toUri().toString(),
                  false,
                  SavepointFormatType.CANONICAL)
              .get(1, TimeUnit.MINUTES);
      assertBackend(cluster, job, backend, parallelism);
      assertThat(output(name).stream().filter(l -> l.startsWith("final")))
          .as("the run at " + parallelism + " stopped before the end of its input")
          .isEmpty();
    }
    List<String> all = new ArrayList<>();
    for (String n : names) {
      List<String> o = output(n);
      assertThat(o).as("output of run " + n).isNotEmpty();
      all.addAll(o);
      OUTPUT.remove(n);
    }
    Collections.sort(all);
    assertThat(all).as(backend + ": runs at 2, 3 and 1 together").isEqualTo(expected);
  }

  private static List<String> output(String name) {
    return new ArrayList<>(OUTPUT.computeIfAbsent(name, n -> new ConcurrentLinkedQueue<>()));
  }

  /** The run used the backend (read once it ended: before, the graph may say "Unknown"). */
  private static void assertBackend(
      MiniCluster cluster, JobID job, Backends.Backend backend, int parallelism) throws Exception {
    if (backend.expectedName() != null) {
      assertThat(MiniClusterJobs.graph(cluster, job).getStateBackendName())
          .as("state backend of the run at " + parallelism)
          .contains(backend.expectedName());
    }
  }

  private static void awaitSuccess(MiniCluster cluster, JobID job) throws Exception {
    MiniClusterJobs.await(cluster, job, JOB_TIMEOUT);
  }

  private static JobID submit(
      MiniCluster cluster,
      Backends.Backend backend,
      int parallelism,
      String name,
      String restorePath)
      throws Exception {
    Configuration c = new Configuration();
    c.set(
        CheckpointingOptions.CHECKPOINTS_DIRECTORY, tmp.resolve("checkpoints").toUri().toString());
    c.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(100));
    c.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
    StreamExecutionEnvironment env = new StreamExecutionEnvironment(backend.apply(c));
    env.setParallelism(parallelism);
    env.setMaxParallelism(128);
    DataGeneratorSource<Long> source =
        new DataGeneratorSource<>(
            new Numbers(), EVENTS, RateLimiterStrategy.perCheckpoint(PER_CHECKPOINT), Types.LONG);
    env.fromSource(
            source,
            WatermarkStrategy.<Long>forMonotonousTimestamps().withTimestampAssigner((v, t) -> v),
            "numbers")
        .uid("numbers")
        .setParallelism(1)
        .keyBy(new ByKey(), Types.LONG)
        .process(new AllStates())
        .uid("all-states")
        .sinkTo(new Collect(name))
        .uid("collect");
    JobGraph graph = env.getStreamGraph().getJobGraph();
    if (restorePath != null) {
      graph.setSavepointRestoreSettings(
          SavepointRestoreSettings.forPath(restorePath, false, RecoveryClaimMode.NO_CLAIM));
    }
    cluster.submitJob(graph).get(1, TimeUnit.MINUTES);
    return graph.getJobID();
  }

  /** The numbers 0..EVENTS-1, each its own event time in ms. */
  static final class Numbers implements GeneratorFunction<Long, Long> {
    private static final long serialVersionUID = 1L;

    @Override
    public Long map(Long i) {
      return i;
    }
  }

  static final class ByKey implements KeySelector<Long, Long> {
    private static final long serialVersionUID = 1L;

    @Override
    public Long getKey(Long v) {
      return v % KEYS;
    }
  }

  static final class Max implements AggregateFunction<Long, Long, Long> {
    private static final long serialVersionUID = 1L;

    @Override
    public Long createAccumulator() {
      return Long.MIN_VALUE;
    }

    @Override
    public Long add(Long v, Long acc) {
      return Math.max(v, acc);
    }

    @Override
    public Long getResult(Long acc) {
      return acc;
    }

    @Override
    public Long merge(Long a, Long b) {
      return Math.max(a, b);
    }
  }

  /** Every keyed state kind and two kinds of event-time timers; see the class comment. */
  static final class AllStates extends KeyedProcessFunction<Long, Long, String> {
    private static final long serialVersionUID = 1L;
    private static final long END = Long.MAX_VALUE;

    private transient ValueState<Long> count;
    private transient ListState<Long> pending;
    private transient MapState<Long, Long> buckets;
    private transient ReducingState<Long> sum;
    private transient AggregatingState<Long, Long> max;

    @Override
    public void open(OpenContext ctx) {
      count = getRuntimeContext().getState(new ValueStateDescriptor<>("count", Types.LONG));
      pending = getRuntimeContext().getListState(new ListStateDescriptor<>("pending", Types.LONG));
      buckets =
          getRuntimeContext()
              .getMapState(new MapStateDescriptor<>("buckets", Types.LONG, Types.LONG));
      sum =
          getRuntimeContext()
              .getReducingState(new ReducingStateDescriptor<>("sum", Long::sum, Types.LONG));
      max =
          getRuntimeContext()
              .getAggregatingState(new AggregatingStateDescriptor<>("max", new Max(), Types.LONG));
    }

    @Override
    public void processElement(Long v, Context ctx, Collector<String> out) throws Exception {
      Long c = count.value();
      if (c == null) {
        ctx.timerService().registerEventTimeTimer(END);
      }
      count.update(c == null ? 1 : c + 1);
      pending.add(v);
      long b = v / BUCKET_MS;
      Long n = buckets.get(b);
      buckets.put(b, n == null ? 1 : n + 1);
      sum.add(v);
      max.add(v);
      ctx.timerService().registerEventTimeTimer((b + 1) * BUCKET_MS - 1);
    }

    @Override
    public void onTimer(long ts, OnTimerContext ctx, Collector<String> out) throws Exception {
      long key = ctx.getCurrentKey();
      if (ts == END) {
        int listLeft = 0;
        for (Long ignored : pending.get()) {
          listLeft++;
        }
        int mapLeft = 0;
        for (Long ignored : buckets.keys()) {
          mapLeft++;
        }
        out.collect(finalLine(key, count.value(), sum.get(), max.get(), listLeft, mapLeft));
        return;
      }
      long b = (ts + 1) / BUCKET_MS - 1;
      long inBucket = 0;
      List<Long> later = new ArrayList<>();
      for (Long v : pending.get()) {
        if (v / BUCKET_MS == b) {
          inBucket += v;
        } else {
          later.add(v);
        }
      }
      pending.update(later);
      Long n = buckets.get(b);
      buckets.remove(b);
      out.collect(bucketLine(key, b, n == null ? 0 : n, inBucket));
    }
  }

  /** Adds every line to {@link #OUTPUT} under the run's name (MiniCluster runs in this JVM). */
  static final class Collect implements Sink<String> {
    private static final long serialVersionUID = 1L;
    private final String name;

    Collect(String name) {
      this.name = name;
    }

    @Override
    public SinkWriter<String> createWriter(WriterInitContext context) {
      ConcurrentLinkedQueue<String> q =
          OUTPUT.computeIfAbsent(name, n -> new ConcurrentLinkedQueue<>());
      return new SinkWriter<>() {
        @Override
        public void write(String line, Context ctx) {
          q.add(line);
        }

        @Override
        public void flush(boolean endOfInput) {}

        @Override
        public void close() {}
      };
    }
  }
}
