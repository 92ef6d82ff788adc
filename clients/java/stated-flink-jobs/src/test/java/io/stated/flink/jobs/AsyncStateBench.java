package io.stated.flink.jobs;

import static org.assertj.core.api.Assertions.assertThat;

import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.v2.ReducingState;
import org.apache.flink.api.common.state.v2.ReducingStateDescriptor;
import org.apache.flink.api.common.state.v2.StateFuture;
import org.apache.flink.api.common.state.v2.ValueState;
import org.apache.flink.api.common.state.v2.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.core.state.StateFutureUtils;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.operators.StreamingRuntimeContext;
import org.apache.flink.util.Collector;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * A throughput comparison, not a timed test: the same {@code enableAsyncState()} job (per event a
 * value read and update and a reducing add, State V2) on hashmap and rocksdb (both through Flink's
 * adaptor over their synchronous backends), ForSt (its asynchronous backend) and stated (its
 * asynchronous backend, when configured, without its value cache and with it), one after the other
 * in fresh MiniClusters in this JVM. It prints records/s and records per CPU second of the JVM, and
 * the p50 and p99 of the latency from the source to the end of an event's state accesses, and
 * stated's records/s as ratios to ForSt's and RocksDB's, and for stated its batches (how many,
 * their size, their round trips: {@link BenchMetrics}); it asserts only that every backend's
 * per-key results are right (and that every event's latency was recorded). Runs only with {@code
 * -Dasync.bench=true} (docs/flink.md):
 *
 * <pre>
 * scripts/flink-jobs.sh -Dtest=AsyncStateBench -Dasync.bench=true [-Dasync.bench.events=N]
 *     [-Dasync.bench.keys=K] [-Dasync.bench.payload=BYTES] [-Dasync.bench.backends=a,b]
 *     [-Dasync.bench.rate=EVENTS_PER_SECOND] [-Dasync.bench.conf.FLINK_OPTION=VALUE ...]
 * </pre>
 *
 * <p>{@code async.bench.rate}: the source emits at most that many events a second (0, the default:
 * as fast as the job takes them), so that every backend's latency is measured at the same input
 * rate, not each at its own saturation, where queues make the latency mostly the queue's length.
 *
 * <p>{@code async.bench.payload}: each event also reads and rewrites a value state of that many
 * incompressible bytes per key (0, the default: none), which holds the key's event count, so a
 * large state (keys times payload) is mostly cold when events are few per key.
 */
class AsyncStateBench {
  static final String CONF_PREFIX = "async.bench.conf.";

  @Test
  @SuppressWarnings("try")
  void sideBySide() throws Exception {
    Assumptions.assumeTrue(
        Boolean.getBoolean("async.bench"), "a benchmark: run it with -Dasync.bench=true");
    JobParams p = new JobParams();
    p.events = Long.getLong("async.bench.events", 400_000L);
    p.keys = Integer.getInteger("async.bench.keys", 20_000);
    int payload = Integer.getInteger("async.bench.payload", 0);
    long eventsPerSecond = Long.getLong("async.bench.rate", 0L);
    if (eventsPerSecond < 0) {
      throw new IllegalArgumentException(
          "async.bench.rate must be 0 (no limit) or a positive rate, not " + eventsPerSecond);
    }
    if (payload != 0) {
      p.payloadBytes = payload;
    }
    p.parallelism = 2;
    p.checkpointIntervalMs = 1000;
    p.validate();
    long[] perKey = new long[p.keys];
    EventGenerator gen = new EventGenerator(p);
    Map<Long, long[]> sums = new HashMap<>();
    for (long i = 0; i < p.events; i++) {
      Event e = gen.map(i);
      perKey[(int) e.key]++;
      sums.computeIfAbsent(e.key, k -> new long[1])[0] += e.value;
    }
    Map<String, Result> expected = new HashMap<>();
    for (Map.Entry<Long, long[]> e : sums.entrySet()) {
      Result r =
          new Result(
              Result.FINAL,
              e.getKey(),
              -1,
              perKey[e.getKey().intValue()],
              e.getValue()[0],
              0,
              0,
              0,
              0,
              // The payload's own count of the key's events.
              payload == 0 ? 0 : perKey[e.getKey().intValue()]);
      expected.put(r.id(), r);
    }
    List<Backends.Backend> backends =
        Backends.with(Backends.HASHMAP, Backends.ROCKSDB, Backends.FORST);
    Backends.Backend stated = Backends.stated();
    if (stated != null) {
      // The same backend with its asynchronous value cache (off by default),
      // in the same run: what the cache is worth, against the same load.
      Map<String, String> o = new java.util.TreeMap<>(stated.options());
      o.putIfAbsent(Backends.STATED_OPTION_PREFIX + "async-cache-size", "64m");
      backends.add(new Backends.Backend("stated-cache", stated.type(), o, null));
    }
    // -Dasync.bench.backends=forst,stated: only those (ratios need forst and rocksdb).
    String only = System.getProperty("async.bench.backends", "");
    if (!only.isEmpty()) {
      List<String> names = List.of(only.split(","));
      backends.removeIf(b -> !names.contains(b.name()));
    }
    List<String> rows = new ArrayList<>();
    List<String> traces = new ArrayList<>();
    Map<String, Double> rate = new java.util.LinkedHashMap<>();
    Path tmp = Files.createTempDirectory("async-bench");
    for (Backends.Backend b : backends) {
      try (MiniCluster mc = BenchCluster.start(2)) {
        String name = "bench-" + UUID.randomUUID();
        Configuration conf = new Configuration();
        conf.set(
            CheckpointingOptions.CHECKPOINTS_DIRECTORY, tmp.resolve(b.name()).toUri().toString());
        // -Dasync.bench.conf.<Flink option>=<value>: e.g. the execution
        // controller's execution.async-state.buffer-size.
        for (String k : System.getProperties().stringPropertyNames()) {
          if (k.startsWith(CONF_PREFIX)) {
            conf.setString(k.substring(CONF_PREFIX.length()), System.getProperty(k));
          }
        }
        StreamExecutionEnvironment env =
            new StreamExecutionEnvironment(KeyedAggregationJob.withDefaults(b.apply(conf), p));
        env.setParallelism(p.parallelism);
        env.setMaxParallelism(p.maxParallelism);
        DataGeneratorSource<Event> source =
            new DataGeneratorSource<>(
                new Stamped(new EventGenerator(p)),
                p.events,
                eventsPerSecond == 0
                    ? RateLimiterStrategy.noOp()
                    : RateLimiterStrategy.perSecond(eventsPerSecond),
                TypeInformation.of(Event.class));
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "events")
            .setParallelism(1)
            .keyBy(new KeyedAggregationJob.EventKey(), Types.LONG)
            .enableAsyncState()
            .process(new CountSum(perKey, payload))
            .sinkTo(new ResultCollectingSink(name, true));
        JobGraph graph = env.getStreamGraph().getJobGraph();
        long cpu0 = cpuNanos();
        long t0 = System.nanoTime();
        JobID job = graph.getJobID();
        mc.submitJob(graph).get(1, TimeUnit.MINUTES);
        MiniClusterJobs.await(mc, job, java.time.Duration.ofMinutes(10));
        long wall = System.nanoTime() - t0;
        long cpu = cpuNanos() - cpu0;
        long[] lat = latencies();
        ResultSet got = ResultCollectingSink.results(name);
        assertThat(got.diff(expected)).as("results on " + b.name()).isEmpty();
        ResultCollectingSink.drop(name);
        rate.put(b.name(), p.events / (wall / 1e9));
        assertThat(lat.length).as("latencies recorded on " + b.name()).isEqualTo(p.events);
        rows.add(
            String.format(
                "%-14s %10.0f %12.0f %8.1fs %8.1f %8.1f",
                b.name(),
                p.events / (wall / 1e9),
                p.events / (cpu / 1e9),
                wall / 1e9,
                lat[(int) (lat.length * 0.50)] / 1e6,
                lat[(int) (lat.length * 0.99)] / 1e6));
        String batches = BenchMetrics.summary();
        if (batches != null) {
          traces.add(b.name() + ": " + batches);
        }
      }
    }
    System.out.println(
        "async-state side by side: "
            + p.events
            + " events over "
            + p.keys
            + " keys, parallelism "
            + p.parallelism
            + ", checkpoint every "
            + p.checkpointIntervalMs
            + " ms, enableAsyncState(), value get+update and reducing add per event"
            + (eventsPerSecond == 0 ? "" : ", source limited to " + eventsPerSecond + " events/s")
            + (payload == 0
                ? ""
                : ", and a "
                    + payload
                    + "-byte payload get+update (state about "
                    + ((long) p.keys * payload >> 20)
                    + " MiB)"));
    System.out.println(
        String.format(
            "%-14s %10s %12s %9s %8s %8s",
            "backend", "records/s", "rec/cpu-s", "wall", "p50 ms", "p99 ms"));
    rows.forEach(System.out::println);
    traces.forEach(System.out::println);
    // The targets are ratios to ForSt and to RocksDB of the same run.
    for (String n : rate.keySet()) {
      if (n.startsWith("stated") && rate.containsKey("forst") && rate.containsKey("rocksdb")) {
        System.out.println(
            String.format(
                "records/s of %s: %.2fx forst's, %.2fx rocksdb's",
                n, rate.get(n) / rate.get("forst"), rate.get(n) / rate.get("rocksdb")));
      }
    }
  }

  /**
   * Each subtask's latencies, published when it closes: from the source's emission of an event to
   * the end of its state accesses in the keyed operator (network buffers, the execution
   * controller's queues and batches, the state backend). MiniCluster runs in this JVM, so {@link
   * System#nanoTime} is one clock for both ends.
   */
  static final java.util.concurrent.ConcurrentLinkedQueue<long[]> LATENCIES =
      new java.util.concurrent.ConcurrentLinkedQueue<>();

  /** The latencies of the last job, sorted; the queue is emptied. */
  private static long[] latencies() {
    List<long[]> parts = new ArrayList<>();
    for (long[] l; (l = LATENCIES.poll()) != null; ) {
      parts.add(l);
    }
    long[] all = parts.stream().flatMapToLong(java.util.Arrays::stream).toArray();
    java.util.Arrays.sort(all);
    return all;
  }

  /** The events of a generator with their timestamp replaced by the emission's nanoTime. */
  static final class Stamped
      implements org.apache.flink.connector.datagen.source.GeneratorFunction<Long, Event> {
    private static final long serialVersionUID = 1L;
    private final EventGenerator gen;

    Stamped(EventGenerator gen) {
      this.gen = gen;
    }

    @Override
    public Event map(Long index) throws Exception {
      Event e = gen.map(index);
      e.timestamp = System.nanoTime();
      return e;
    }
  }

  private static long cpuNanos() {
    return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
        .getProcessCpuTime();
  }

  /** Per event: a value read and update (the key's count) and a reducing add (its sum). */
  static final class CountSum extends KeyedProcessFunction<Long, Event, Result> {
    private static final long serialVersionUID = 1L;
    private final long[] perKey;
    private final int payloadBytes;
    private transient ValueState<byte[]> payload;
    private transient ValueState<Long> count;
    private transient ReducingState<Long> sum;
    private transient long[] latency;
    private transient int latencies;

    CountSum(long[] perKey, int payloadBytes) {
      this.perKey = perKey;
      this.payloadBytes = payloadBytes;
    }

    @Override
    public void open(OpenContext openContext) {
      StreamingRuntimeContext ctx = (StreamingRuntimeContext) getRuntimeContext();
      count = ctx.getValueState(new ValueStateDescriptor<>("count", Types.LONG));
      if (payloadBytes > 0) {
        payload =
            ctx.getValueState(
                new ValueStateDescriptor<>(
                    "payload", PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO));
      }
      sum = ctx.getReducingState(new ReducingStateDescriptor<>("sum", Long::sum, Types.LONG));
      latency = new long[1024];
      latencies = 0;
    }

    @Override
    public void close() throws Exception {
      LATENCIES.add(java.util.Arrays.copyOf(latency, latencies));
      super.close();
    }

    /** On the task thread (the futures' callbacks run in its mailbox). */
    private void recordLatency(long nanos) {
      if (latencies == latency.length) {
        latency = java.util.Arrays.copyOf(latency, latency.length * 2);
      }
      latency[latencies++] = nanos;
    }

    /** The key's count and sum; the final result once the key's last event is in. */
    private StateFuture<Void> countAndSum(
        Event e, Long c, long payloadCount, Collector<Result> out) {
      long key = e.key;
      long n = (c == null ? 0 : c) + 1;
      return count
          .asyncUpdate(n)
          .thenCompose(x -> sum.asyncAdd(e.value))
          .thenCompose(
              x ->
                  n == perKey[(int) key]
                      ? sum.asyncGet()
                          .thenAccept(
                              s ->
                                  out.collect(
                                      new Result(
                                          Result.FINAL, key, -1, n, s, 0, 0, 0, 0, payloadCount)))
                      : StateFutureUtils.completedVoidFuture());
    }

    @Override
    public void processElement(Event e, Context ctx, Collector<Result> out) {
      long key = e.key;
      long emitted = e.timestamp;
      StateFuture<Long> payloadCount =
          payloadBytes == 0
              ? StateFutureUtils.completedFuture(0L)
              : payload
                  .asyncValue()
                  .thenCompose(
                      p -> {
                        byte[] q = p == null ? Payload.initial(key, payloadBytes) : p;
                        Payload.apply(q, e.value);
                        return payload.asyncUpdate(q).thenApply(x -> Payload.count(q));
                      });
      payloadCount
          .thenCompose(pc -> count.asyncValue().thenCompose(c -> countAndSum(e, c, pc, out)))
          .thenAccept(x -> recordLatency(System.nanoTime() - emitted));
    }
  }
}
