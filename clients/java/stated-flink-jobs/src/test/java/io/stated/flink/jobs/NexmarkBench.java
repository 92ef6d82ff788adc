package io.stated.flink.jobs;

import static org.assertj.core.api.Assertions.assertThat;

import java.lang.management.ManagementFactory;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.runtime.checkpoint.AbstractCheckpointStats;
import org.apache.flink.runtime.checkpoint.CheckpointStatsSnapshot;
import org.apache.flink.runtime.checkpoint.FailedCheckpointStats;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.Table;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.types.Row;
import org.apache.flink.types.RowKind;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A benchmark, not a timed test: Nexmark's query 17 ("auction statistics": per auction and day, the
 * count of bids, the counts in three price ranks, and the minimum, maximum, average and sum of the
 * price) in Flink SQL, over {@link NexmarkBids}' bid stream with Nexmark's hot-auction skew, on
 * hashmap, rocksdb, forst and stated, one after the other in fresh MiniClusters in this JVM. The
 * group aggregation is Flink's own SQL operator: synchronous by default, and on the asynchronous
 * state API (ForSt's and stated's asynchronous backends; hashmap and rocksdb through Flink's
 * adaptor) with {@code -Dnexmark.bench.conf.table.exec.async-state.enabled=true}.
 *
 * <p>The query adds one aggregate to Nexmark's, {@code MAX(emitted)}: the source's clock at the
 * newest bid of the key, so that the sink can measure each update's latency from the source to the
 * sink (the planner emits one update per bid). It prints records/s, records per CPU second of the
 * JVM, the p50 and p99 of that latency, the checkpoints' count, p99 duration and size, and stated's
 * records/s as ratios to ForSt's and RocksDB's; it asserts that every backend's final rows equal
 * the query's result computed here from the same bids. Runs only with {@code -Dnexmark.bench=true}
 * (docs/flink.md, "Nexmark's query 17"):
 *
 * <pre>
 * scripts/flink-jobs.sh -Dtest=NexmarkBench -Dnexmark.bench=true [-Dnexmark.bench.bids=N]
 *     [-Dnexmark.bench.backends=a,b] [-Dnexmark.bench.rate=BIDS_PER_SECOND]
 *     [-Dnexmark.bench.conf.OPTION=VALUE ...]
 * </pre>
 */
class NexmarkBench {
  static final String CONF_PREFIX = "nexmark.bench.conf.";
  static final long SEED = 42;

  /** Nexmark's query 17, with MAX(emitted) added for the latency (see the class comment). */
  static final String Q17 =
      "SELECT auction, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd') AS `day`,"
          + " COUNT(*) AS total_bids,"
          + " COUNT(*) FILTER (WHERE price < 10000) AS rank1_bids,"
          + " COUNT(*) FILTER (WHERE price >= 10000 AND price < 1000000) AS rank2_bids,"
          + " COUNT(*) FILTER (WHERE price >= 1000000) AS rank3_bids,"
          + " MIN(price) AS min_price, MAX(price) AS max_price,"
          + " AVG(price) AS avg_price, SUM(price) AS sum_price,"
          + " MAX(emitted) AS last_emitted"
          + " FROM bid GROUP BY auction, DATE_FORMAT(`dateTime`, 'yyyy-MM-dd')";

  /** The number of result columns compared: all but last_emitted. */
  static final int COMPARED = 10;

  @Test
  void sideBySide() throws Exception {
    Assumptions.assumeTrue(
        Boolean.getBoolean("nexmark.bench"), "a benchmark: run it with -Dnexmark.bench=true");
    long bids = Long.getLong("nexmark.bench.bids", 2_000_000L);
    long rate = Long.getLong("nexmark.bench.rate", 0L);
    if (bids <= 0 || rate < 0) {
      throw new IllegalArgumentException(
          "nexmark.bench.bids must be positive and nexmark.bench.rate 0 (no limit) or positive,"
              + " not "
              + bids
              + " and "
              + rate);
    }
    Map<String, String> options = new HashMap<>();
    for (String k : System.getProperties().stringPropertyNames()) {
      if (k.startsWith(CONF_PREFIX)) {
        options.put(k.substring(CONF_PREFIX.length()), System.getProperty(k));
      }
    }
    String only = System.getProperty("nexmark.bench.backends", "");
    run(bids, rate, only.isEmpty() ? null : List.of(only.split(",")), options);
  }

  /**
   * The query on every backend with a few bids, synchronous and asynchronous, in every run of the
   * job tests: the benchmark's own check (each backend's rows against the reference) stays honest,
   * and Flink SQL's group aggregation on stated is tested in both modes.
   */
  @ParameterizedTest(name = "async state: {0}")
  @ValueSource(booleans = {false, true})
  void smoke(boolean asyncState) throws Exception {
    run(30_000, 0, null, Map.of("table.exec.async-state.enabled", String.valueOf(asyncState)));
  }

  /**
   * Runs the query over {@code bids} bids on each backend (all, or those named in {@code only}),
   * with the Flink and table {@code options}; asserts each backend's rows and prints the table.
   */
  @SuppressWarnings("try")
  static void run(long bids, long rate, List<String> only, Map<String, String> options)
      throws Exception {
    Map<String, List<Object>> expected = expected(bids);
    List<Backends.Backend> backends =
        Backends.with(Backends.HASHMAP, Backends.ROCKSDB, Backends.FORST);
    Backends.Backend statedBackend = Backends.stated();
    if (statedBackend != null
        && Boolean.parseBoolean(options.get("table.exec.async-state.enabled"))) {
      // The asynchronous backend with its value cache (off by default), in the
      // same run: with hot keys, a cached get needs no daemon operation.
      Map<String, String> o = new java.util.TreeMap<>(statedBackend.options());
      o.putIfAbsent(Backends.STATED_OPTION_PREFIX + "async-cache-size", "64m");
      backends.add(new Backends.Backend("stated-cache", statedBackend.type(), o, null));
    }
    if (only != null) {
      backends.removeIf(b -> !only.contains(b.name()));
    }
    JobParams p = new JobParams();
    p.parallelism = 2;
    p.checkpointIntervalMs = 1000;
    List<String> rows = new ArrayList<>();
    List<String> traces = new ArrayList<>();
    Map<String, Double> recordsPerSecond = new LinkedHashMap<>();
    Path tmp = Files.createTempDirectory("nexmark-bench");
    String mode = "synchronous state";
    for (Backends.Backend b : backends) {
      try (MiniCluster mc = BenchCluster.start(p.parallelism)) {
        String name = "nexmark-" + UUID.randomUUID();
        Configuration conf = new Configuration();
        conf.set(
            CheckpointingOptions.CHECKPOINTS_DIRECTORY, tmp.resolve(b.name()).toUri().toString());
        options.forEach(conf::setString);
        if (Boolean.parseBoolean(options.get("table.exec.async-state.enabled"))) {
          mode = "asynchronous state (table.exec.async-state.enabled)";
        }
        StreamExecutionEnvironment env =
            new StreamExecutionEnvironment(KeyedAggregationJob.withDefaults(b.apply(conf), p));
        env.setParallelism(p.parallelism);
        env.setMaxParallelism(p.maxParallelism);
        StreamTableEnvironment tenv = StreamTableEnvironment.create(env);
        options.forEach(
            (k, v) -> {
              if (k.startsWith("table.")) {
                tenv.getConfig().getConfiguration().setString(k, v);
              }
            });
        DataGeneratorSource<Row> source =
            new DataGeneratorSource<>(
                new NexmarkBids(SEED, true),
                bids,
                rate == 0 ? RateLimiterStrategy.noOp() : RateLimiterStrategy.perSecond(rate),
                NexmarkBids.TYPE);
        tenv.createTemporaryView(
            "bid",
            tenv.fromDataStream(
                env.fromSource(source, WatermarkStrategy.noWatermarks(), "bids")
                    .setParallelism(1)));
        Table q = tenv.sqlQuery(Q17);
        tenv.toChangelogStream(q).sinkTo(new LatestRowSink(name));
        JobGraph graph = env.getStreamGraph().getJobGraph();
        long cpu0 = cpuNanos();
        long t0 = System.nanoTime();
        JobID job = graph.getJobID();
        mc.submitJob(graph).get(1, TimeUnit.MINUTES);
        MiniClusterJobs.await(mc, job, Duration.ofMinutes(30));
        long wall = System.nanoTime() - t0;
        long cpu = cpuNanos() - cpu0;
        CheckpointStatsSnapshot stats = MiniClusterJobs.checkpointStats(mc, job);
        Map<String, List<Object>> got = LatestRowSink.rows(name);
        long[] lat = LatestRowSink.latencies(name);
        LatestRowSink.drop(name);
        assertThat(diff(got, expected)).as("query 17's rows on " + b.name()).isEmpty();
        assertThat(lat.length).as("updates (one per bid) on " + b.name()).isEqualTo(bids);
        List<AbstractCheckpointStats> done = new ArrayList<>();
        Map<String, Integer> failures = new java.util.TreeMap<>();
        for (AbstractCheckpointStats c : stats.getHistory().getCheckpoints()) {
          if (c.getStatus().isCompleted()) {
            done.add(c);
          } else if (c instanceof FailedCheckpointStats f) {
            failures.merge(String.valueOf(f.getFailureMessage()), 1, Integer::sum);
          }
        }
        failures.forEach(
            (why, n) -> traces.add(b.name() + ": " + n + " checkpoint(s) failed: " + why));
        long[] durations =
            done.stream()
                .mapToLong(AbstractCheckpointStats::getEndToEndDuration)
                .sorted()
                .toArray();
        long lastSize =
            done.stream()
                .max(java.util.Comparator.comparingLong(AbstractCheckpointStats::getCheckpointId))
                .map(AbstractCheckpointStats::getStateSize)
                .orElse(-1L);
        recordsPerSecond.put(b.name(), bids / (wall / 1e9));
        rows.add(
            String.format(
                "%-12s %10.0f %10.0f %8.1fs %8.1f %8.1f %6d %6d %10.0f %10.1f",
                b.name(),
                bids / (wall / 1e9),
                bids / (cpu / 1e9),
                wall / 1e9,
                lat[(int) (lat.length * 0.50)] / 1e6,
                lat[(int) (lat.length * 0.99)] / 1e6,
                durations.length,
                stats.getCounts().getNumberOfFailedCheckpoints(),
                SideBySideBenchmark.percentile(durations, 0.99),
                lastSize / 1048576.0));
        String batches = BenchMetrics.summary();
        if (batches != null) {
          traces.add(b.name() + ": " + batches);
        }
      }
    }
    System.out.println(
        "Nexmark q17 side by side: "
            + bids
            + " bids over "
            + expected.size()
            + " auctions (half the bids on the newest), parallelism "
            + p.parallelism
            + ", checkpoint every "
            + p.checkpointIntervalMs
            + " ms, "
            + mode
            + (rate == 0 ? "" : ", source limited to " + rate + " bids/s"));
    System.out.println(
        String.format(
            "%-12s %10s %10s %9s %8s %8s %6s %6s %10s %10s",
            "backend",
            "records/s",
            "rec/cpu-s",
            "wall",
            "p50 ms",
            "p99 ms",
            "ckpts",
            "failed",
            "ckpt p99ms",
            "size MiB"));
    rows.forEach(System.out::println);
    traces.forEach(System.out::println);
    Double forst = recordsPerSecond.get("forst");
    Double rocksdb = recordsPerSecond.get("rocksdb");
    for (Map.Entry<String, Double> e : recordsPerSecond.entrySet()) {
      if (e.getKey().startsWith("stated") && forst != null && rocksdb != null) {
        System.out.println(
            String.format(
                "records/s of %s: %.2fx forst's, %.2fx rocksdb's",
                e.getKey(), e.getValue() / forst, e.getValue() / rocksdb));
      }
    }
  }

  /** Query 17's result computed from the bids: the compared columns per "auction|day". */
  static Map<String, List<Object>> expected(long bids) {
    Map<String, long[]> acc = new HashMap<>();
    for (long i = 0; i < bids; i++) {
      NexmarkBids.Bid b = NexmarkBids.bid(i, SEED);
      String day = b.dateTime().toLocalDate().toString();
      long[] a =
          acc.computeIfAbsent(
              b.auction() + "|" + day, k -> new long[] {0, 0, 0, 0, Long.MAX_VALUE, 0, 0});
      a[0]++;
      a[b.price() < 10_000 ? 1 : b.price() < 1_000_000 ? 2 : 3]++;
      a[4] = Math.min(a[4], b.price());
      a[5] = Math.max(a[5], b.price());
      a[6] += b.price();
    }
    Map<String, List<Object>> rows = new HashMap<>();
    for (Map.Entry<String, long[]> e : acc.entrySet()) {
      long[] a = e.getValue();
      String[] key = e.getKey().split("\\|");
      rows.put(
          e.getKey(),
          List.of(
              Long.parseLong(key[0]),
              key[1],
              a[0],
              a[1],
              a[2],
              a[3],
              a[4],
              a[5],
              a[6] / a[0],
              a[6]));
    }
    return rows;
  }

  /** What differs between the rows the job left and the expected ones (at most 10 lines). */
  static List<String> diff(Map<String, List<Object>> got, Map<String, List<Object>> want) {
    List<String> d = new ArrayList<>();
    for (Map.Entry<String, List<Object>> e : want.entrySet()) {
      List<Object> g = got.get(e.getKey());
      if (!e.getValue().equals(g)) {
        d.add(e.getKey() + ": want " + e.getValue() + ", got " + g);
      }
    }
    for (String k : got.keySet()) {
      if (!want.containsKey(k)) {
        d.add(k + ": not expected, got " + got.get(k));
      }
    }
    return d.size() > 10 ? d.subList(0, 10) : d;
  }

  private static long cpuNanos() {
    return ((com.sun.management.OperatingSystemMXBean) ManagementFactory.getOperatingSystemMXBean())
        .getProcessCpuTime();
  }

  /**
   * Keeps the newest row per key ("auction|day") of the query's changelog, and each insert's or
   * update's latency from the bid's emission (its last_emitted column, the newest bid's) to here.
   * The planner's sink runs chained to the aggregation, so a key's updates arrive in order.
   */
  static final class LatestRowSink implements Sink<Row> {
    private static final long serialVersionUID = 1L;
    private static final ConcurrentHashMap<String, ConcurrentHashMap<String, List<Object>>> ROWS =
        new ConcurrentHashMap<>();
    private static final ConcurrentHashMap<String, ConcurrentLinkedQueue<long[]>> LATENCIES =
        new ConcurrentHashMap<>();

    private final String name;

    LatestRowSink(String name) {
      this.name = name;
    }

    static Map<String, List<Object>> rows(String name) {
      return ROWS.getOrDefault(name, new ConcurrentHashMap<>());
    }

    /** The latencies of every subtask, sorted. */
    static long[] latencies(String name) {
      long[] all =
          LATENCIES.getOrDefault(name, new ConcurrentLinkedQueue<>()).stream()
              .flatMapToLong(Arrays::stream)
              .toArray();
      Arrays.sort(all);
      return all;
    }

    static void drop(String name) {
      ROWS.remove(name);
      LATENCIES.remove(name);
    }

    @Override
    public SinkWriter<Row> createWriter(WriterInitContext context) {
      Map<String, List<Object>> rows = ROWS.computeIfAbsent(name, n -> new ConcurrentHashMap<>());
      ConcurrentLinkedQueue<long[]> published =
          LATENCIES.computeIfAbsent(name, n -> new ConcurrentLinkedQueue<>());
      return new SinkWriter<>() {
        private long[] latency = new long[1024];
        private int n;

        @Override
        public void write(Row r, Context ctx) {
          RowKind kind = r.getKind();
          if (kind == RowKind.UPDATE_BEFORE) {
            return;
          }
          if (kind == RowKind.DELETE) {
            throw new IllegalStateException("query 17 retracted a row: " + r);
          }
          if (n == latency.length) {
            latency = Arrays.copyOf(latency, n * 2);
          }
          latency[n++] = System.nanoTime() - (Long) r.getField(COMPARED);
          List<Object> row = new ArrayList<>(COMPARED);
          for (int i = 0; i < COMPARED; i++) {
            row.add(r.getField(i));
          }
          rows.put(r.getField(0) + "|" + r.getField(1), row);
        }

        @Override
        public void flush(boolean endOfInput) {}

        @Override
        public void close() {
          published.add(Arrays.copyOf(latency, n));
        }
      };
    }
  }
}
