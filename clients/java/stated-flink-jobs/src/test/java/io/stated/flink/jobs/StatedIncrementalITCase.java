package io.stated.flink.jobs;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.nio.file.FileVisitResult;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.SimpleFileVisitor;
import java.nio.file.attribute.BasicFileAttributes;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.stream.Collectors;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.FlatMapFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.WebOptions;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.connector.datagen.source.GeneratorFunction;
import org.apache.flink.runtime.checkpoint.AbstractCheckpointStats;
import org.apache.flink.runtime.checkpoint.CheckpointStatsSnapshot;
import org.apache.flink.runtime.checkpoint.CheckpointStatsStatus;
import org.apache.flink.runtime.checkpoint.CompletedCheckpointStats;
import org.apache.flink.runtime.checkpoint.RestoredCheckpointStats;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.test.junit5.InjectMiniCluster;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.apache.flink.util.Collector;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.io.TempDir;

/**
 * The example job on stated's incremental checkpoints ({@code state.backend.stated.incremental},
 * docs/flink.md) in a MiniCluster, with a daemon of each test's own whose {@code --external-dir} is
 * Flink's checkpoint directory:
 *
 * <ul>
 *   <li>the daemon's shared files appear in Flink's {@code shared} directory of the job while it
 *       runs, an injected failure restores from the last checkpoint (exactly: the output equals
 *       {@link ReferenceModel}'s), the shared files of subsumed checkpoints are deleted, and once
 *       the job finished and Flink discarded its checkpoints nothing is left in the job's
 *       directory: no file, and no directory but the empty {@code shared} and {@code taskowned}
 *       ones Flink makes itself;
 *   <li>a kill -9 of the daemon while a checkpoint is in progress restores exactly;
 *   <li>the bytes a checkpoint writes after 1% of the keys changed, as a share of the full state (a
 *       small job of its own, {@link #onePercentJob}).
 * </ul>
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class StatedIncrementalITCase {
  private static final Duration JOB_TIMEOUT = Duration.ofMinutes(2);

  @RegisterExtension
  static final MiniClusterExtension CLUSTER =
      new MiniClusterExtension(
          new MiniClusterResourceConfiguration.Builder()
              .setConfiguration(clusterConfig())
              .setNumberTaskManagers(1)
              .setNumberSlotsPerTaskManager(2)
              .build());

  @TempDir static Path tmp;

  private static Configuration clusterConfig() {
    Configuration c = new Configuration();
    // The figure's job runs about 35 checkpoints; the statistics keep 10 by default.
    c.set(WebOptions.CHECKPOINTS_HISTORY_SIZE, 100);
    return c;
  }

  /** Every regular file under {@code dir} whose name matches {@code suffix} (all: ""). */
  private static List<Path> files(Path dir, String suffix) throws IOException {
    return walk(dir).stream()
        .filter(Files::isRegularFile)
        .filter(p -> p.getFileName().toString().endsWith(suffix))
        .collect(Collectors.toList());
  }

  /**
   * Every file and directory under {@code root} (not {@code root} itself). Flink may be deleting
   * while this walks (it discards a finished job's checkpoints in the background), so an entry that
   * vanishes under the walk is skipped, not an error.
   */
  private static List<Path> walk(Path root) throws IOException {
    List<Path> found = new ArrayList<>();
    if (!Files.exists(root)) {
      return found;
    }
    Files.walkFileTree(
        root,
        new SimpleFileVisitor<>() {
          @Override
          public FileVisitResult preVisitDirectory(Path dir, BasicFileAttributes attrs) {
            if (!dir.equals(root)) {
              found.add(dir);
            }
            return FileVisitResult.CONTINUE;
          }

          @Override
          public FileVisitResult visitFile(Path file, BasicFileAttributes attrs) {
            found.add(file);
            return FileVisitResult.CONTINUE;
          }

          @Override
          public FileVisitResult visitFileFailed(Path file, IOException e) throws IOException {
            if (e instanceof NoSuchFileException) {
              return FileVisitResult.CONTINUE;
            }
            throw e;
          }

          @Override
          public FileVisitResult postVisitDirectory(Path dir, IOException e) throws IOException {
            if (e != null && !(e instanceof NoSuchFileException)) {
              throw e;
            }
            return FileVisitResult.CONTINUE;
          }
        });
    return found;
  }

  /** Flink's checkpoint directory, which every test's daemon gets as its --external-dir. */
  static Path checkpoints(Path tmp) throws IOException {
    Path checkpoints = tmp.resolve("checkpoints");
    Files.createDirectories(checkpoints);
    return checkpoints.toRealPath();
  }

  /**
   * A daemon of the test's own whose --external-dir is {@link #checkpoints}; skips the test when
   * stated is not configured.
   */
  static StatedDaemon startDaemon(Path tmp) throws Exception {
    String bin = System.getProperty(StatedDaemon.BIN_PROPERTY, "");
    Assumptions.assumeTrue(
        Backends.statedClassPresent() && !bin.isEmpty(),
        "stated not configured: run with -Pstated -D"
            + StatedDaemon.BIN_PROPERTY
            + "=<stated binary> (scripts/flink-jobs.sh does)");
    return StatedDaemon.start(
        Path.of(bin),
        tmp.resolve("daemon-" + UUID.randomUUID()),
        "--external-dir",
        checkpoints(tmp).toString());
  }

  /** The job configuration: stated's incremental checkpoints on {@code daemon}. */
  static Configuration incremental(StatedDaemon daemon, Path tmp) throws IOException {
    Backends.Backend backend =
        new Backends.Backend(
            "stated-incremental",
            Backends.STATED_FACTORY,
            Map.of(
                Backends.STATED_OPTION_PREFIX + "socket", daemon.socket().toString(),
                Backends.STATED_OPTION_PREFIX + "kind", "lsm",
                Backends.STATED_OPTION_PREFIX + "incremental", "true"),
            null);
    Configuration c = new Configuration();
    c.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, checkpoints(tmp).toUri().toString());
    c.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
    return backend.apply(c);
  }

  static void assertMatchesModel(ResultSet got) {
    assertThat(got.diff(ReferenceModel.expected(KeyedAggregationITCase.params())))
        .as("output against the reference model")
        .isEmpty();
  }

  static void assertRestoredFromCheckpoint(MiniCluster cluster, JobID job) throws Exception {
    RestoredCheckpointStats restored =
        MiniClusterJobs.checkpointStats(cluster, job).getLatestRestoredCheckpoint();
    assertThat(restored).as("the job restored from a checkpoint").isNotNull();
    assertThat(restored.getCheckpointId()).isPositive();
  }

  /**
   * Waits (at most {@code seconds}) until Flink discarded the finished job's checkpoints, and
   * returns what is left in {@code jobDir} ({@link #leftovers}).
   */
  private static List<Path> awaitDiscarded(Path jobDir, long seconds) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
    List<Path> left = leftovers(jobDir);
    while (!left.isEmpty() && System.nanoTime() < deadline) {
      Thread.sleep(100);
      left = leftovers(jobDir);
    }
    return left;
  }

  /**
   * The empty {@code chk-<id>} directories among {@code left} whose checkpoint did not complete
   * (Flink's statistics of the job say so).
   */
  private static List<Path> emptyDirsOfUncompleted(List<Path> left, MiniCluster cluster, JobID job)
      throws Exception {
    List<Path> out = new ArrayList<>();
    for (Path p : left) {
      String name = p.getFileName().toString();
      if (!name.startsWith("chk-") || left.stream().anyMatch(q -> q.getParent().equals(p))) {
        continue;
      }
      long id = Long.parseLong(name.substring("chk-".length()));
      AbstractCheckpointStats c =
          MiniClusterJobs.checkpointStats(cluster, job).getHistory().getCheckpointById(id);
      if (c == null || c.getStatus() != CheckpointStatsStatus.COMPLETED) {
        out.add(p);
      }
    }
    return out;
  }

  /**
   * What is left under a job's directory: every file, and every directory but {@code shared} and
   * {@code taskowned}, which Flink makes and keeps while the cluster runs.
   */
  private static List<Path> leftovers(Path jobDir) throws IOException {
    return walk(jobDir).stream()
        .filter(p -> !p.equals(jobDir.resolve("shared")) && !p.equals(jobDir.resolve("taskowned")))
        .collect(Collectors.toList());
  }

  /**
   * Prints what is left of the finished job (not asserted: the files of an upload the kill cut
   * short stay, as docs/flink.md says).
   */
  private static void printLeftovers(String test, Path jobDir) throws Exception {
    List<Path> left = awaitDiscarded(jobDir, 5);
    long shared = left.stream().filter(f -> f.getParent().endsWith("shared")).count();
    System.out.println(
        test
            + ": left after the job finished and Flink discarded its checkpoints: "
            + shared
            + " shared files, other: "
            + left.stream()
                .filter(f -> !f.getParent().endsWith("shared"))
                .map(f -> jobDir.relativize(f).toString())
                .collect(Collectors.toList()));
  }

  @Test
  void failureRestoresFromIncrementalCheckpointAndFlinkDeletesFiles(
      @InjectMiniCluster MiniCluster cluster) throws Exception {
    try (StatedDaemon daemon = startDaemon(tmp)) {
      JobParams p = KeyedAggregationITCase.params();
      p.failAfterRecords = p.events / p.parallelism / 2;
      String name = "run-" + UUID.randomUUID();
      JobID job =
          MiniClusterJobs.submit(
              cluster, incremental(daemon, tmp), p, new ResultCollectingSink(name, false), null);
      Path jobDir = checkpoints(tmp).resolve(job.toString());

      // While it runs, the daemon's SSTs are Flink's shared state of the job.
      MiniClusterJobs.awaitCompletedCheckpoints(cluster, job, 3, JOB_TIMEOUT);
      List<Path> ssts = files(jobDir.resolve("shared"), ".sst");
      assertThat(ssts)
          .as("the daemon's shared files in Flink's shared directory of the job")
          .isNotEmpty();

      MiniClusterJobs.await(cluster, job, JOB_TIMEOUT);
      RestoredCheckpointStats restored =
          MiniClusterJobs.checkpointStats(cluster, job).getLatestRestoredCheckpoint();
      assertThat(restored).as("the job restored from a checkpoint after the failure").isNotNull();
      assertMatchesModel(ResultCollectingSink.results(name));
      ResultCollectingSink.drop(name);

      // The job finished: Flink discards its checkpoints (asynchronously): the private
      // files and meta data of the last one, its directory (which it deletes without
      // recursion, so a subdirectory there would stop the discard before the shared files),
      // and then every shared file its registry still counts. Nothing may be left.
      List<Path> left = awaitDiscarded(jobDir, 30);
      List<Path> aborted = emptyDirsOfUncompleted(left, cluster, job);
      if (!aborted.isEmpty()) {
        // Flink deletes an aborted checkpoint's directory without recursion while the task
        // may still be deleting the files it wrote there (its own cleanup, asynchronous):
        // the directory can stay, empty, whatever the state backend. Not stated's to delete.
        System.out.println("empty directories of checkpoints that did not complete: " + aborted);
        left.removeAll(aborted);
      }
      assertThat(left)
          .as("files and checkpoint directories left after Flink discarded the job's checkpoints")
          .isEmpty();
      // The shared files seen after checkpoint 3 belong to checkpoints Flink subsumed
      // long before the end: its SharedStateRegistry deleted them.
    }
  }

  /**
   * Waits for a checkpoint above {@code after} that Flink triggered and not all subtasks
   * acknowledged yet (the daemon freezing or uploading it), and returns its id.
   */
  private static long awaitCheckpointInProgress(MiniCluster cluster, JobID job, long after)
      throws Exception {
    long deadline = System.nanoTime() + JOB_TIMEOUT.toNanos();
    while (System.nanoTime() < deadline) {
      CheckpointStatsSnapshot s = MiniClusterJobs.checkpointStats(cluster, job);
      if (s != null) {
        for (AbstractCheckpointStats c : s.getHistory().getCheckpoints()) {
          if (c.getStatus() == CheckpointStatsStatus.IN_PROGRESS && c.getCheckpointId() > after) {
            return c.getCheckpointId();
          }
        }
      }
      Thread.sleep(2);
    }
    throw new IllegalStateException(
        "job " + job + " had no checkpoint above " + after + " in progress within " + JOB_TIMEOUT);
  }

  /** Waits until checkpoint {@code id} completed or failed, and returns which. */
  private static CheckpointStatsStatus awaitCheckpointEnd(MiniCluster cluster, JobID job, long id)
      throws Exception {
    long deadline = System.nanoTime() + JOB_TIMEOUT.toNanos();
    while (System.nanoTime() < deadline) {
      AbstractCheckpointStats c =
          MiniClusterJobs.checkpointStats(cluster, job).getHistory().getCheckpointById(id);
      if (c != null && c.getStatus() != CheckpointStatsStatus.IN_PROGRESS) {
        return c.getStatus();
      }
      Thread.sleep(20);
    }
    throw new IllegalStateException(
        "checkpoint " + id + " of job " + job + " still in progress after " + JOB_TIMEOUT);
  }

  /**
   * kill -9 of the daemon while Flink waits for a checkpoint, then a new daemon on the same socket,
   * data dir and --external-dir: the checkpoint fails, the task fails on the lost connection, Flink
   * restores it from the last completed checkpoint (the new daemon loads the files its handles
   * name) and the output is exactly the model's. A kill that lands just after the last
   * acknowledgement (the checkpoint then completes) is repeated, up to 3 kills, so that the test
   * shows a kill in the middle of a checkpoint.
   */
  @Test
  void daemonKilledMidCheckpointRestoresExactly(@InjectMiniCluster MiniCluster cluster)
      throws Exception {
    try (StatedDaemon daemon = startDaemon(tmp)) {
      Configuration c = StatedDaemon.restartsOutlastingKill(incremental(daemon, tmp));
      String name = "run-" + UUID.randomUUID();
      JobID job =
          MiniClusterJobs.submit(
              cluster,
              c,
              KeyedAggregationITCase.params(),
              new ResultCollectingSink(name, false),
              null);
      MiniClusterJobs.awaitMidStream(
          cluster,
          job,
          name,
          ReferenceModel.expected(KeyedAggregationITCase.params()).size(),
          JOB_TIMEOUT);
      List<String> kills = new ArrayList<>();
      long last = 0;
      boolean failedMidCheckpoint = false;
      while (!failedMidCheckpoint && kills.size() < 3) {
        last = awaitCheckpointInProgress(cluster, job, last);
        daemon.kill9();
        daemon.restart();
        CheckpointStatsStatus end = awaitCheckpointEnd(cluster, job, last);
        kills.add("checkpoint " + last + " " + end);
        failedMidCheckpoint = end == CheckpointStatsStatus.FAILED;
      }
      System.out.println("daemonKilledMidCheckpointRestoresExactly: kills during " + kills);
      assertThat(failedMidCheckpoint)
          .as("a kill -9 that failed the checkpoint in progress: " + kills)
          .isTrue();
      MiniClusterJobs.await(cluster, job, JOB_TIMEOUT);
      assertRestoredFromCheckpoint(cluster, job);
      assertMatchesModel(ResultCollectingSink.results(name));
      ResultCollectingSink.drop(name);
      printLeftovers(
          "daemonKilledMidCheckpointRestoresExactly", checkpoints(tmp).resolve(job.toString()));
    }
  }

  // ---- The figure: bytes per checkpoint after 1% of the keys changed ----

  /** Keys the figure's job changes per round: 1% of its keys. */
  private static final int PER_ROUND = 200;

  private static final int KEYS = PER_ROUND * 100;
  private static final int PAYLOAD_BYTES = 512;
  private static final int ROUNDS = 30;
  private static final int MEASURED = 20;

  /** Keys each subtask of {@link Rewriter} changed between two checkpoints, by checkpoint id. */
  private static final Map<Long, AtomicLong> CHANGED = new ConcurrentHashMap<>();

  /**
   * Turns the source's index into key changes: round 0 (the first {@link #PER_ROUND} indexes)
   * writes every key, 100 per index; round r > 0 changes the keys {@code j * 100 + r % 100}, j <
   * PER_ROUND: exactly 1% of the keys, spread over the key space, a different 1% each round.
   */
  static final class Rounds implements FlatMapFunction<Long, Tuple2<Long, Integer>> {
    private static final long serialVersionUID = 1L;

    @Override
    public void flatMap(Long i, Collector<Tuple2<Long, Integer>> out) {
      int round = (int) (i / PER_ROUND);
      long j = i % PER_ROUND;
      if (round == 0) {
        for (int k = 0; k < 100; k++) {
          out.collect(Tuple2.of(j * 100 + k, 0));
        }
      } else {
        out.collect(Tuple2.of(j * 100 + round % 100, round));
      }
    }
  }

  /** The source's index as it is. */
  static final class Index implements GeneratorFunction<Long, Long> {
    private static final long serialVersionUID = 1L;

    @Override
    public Long map(Long i) {
      return i;
    }
  }

  /**
   * Overwrites the key's value state with {@link #PAYLOAD_BYTES} incompressible bytes of its round,
   * and counts, per checkpoint, the changes since the previous one into {@link #CHANGED}.
   */
  static final class Rewriter extends KeyedProcessFunction<Long, Tuple2<Long, Integer>, Long>
      implements CheckpointedFunction {
    private static final long serialVersionUID = 1L;
    private transient ValueState<byte[]> value;
    private transient long changed;

    @Override
    public void open(OpenContext ctx) {
      value =
          getRuntimeContext()
              .getState(new ValueStateDescriptor<>("value", BytePrimitiveArraySerializer.INSTANCE));
    }

    @Override
    public void processElement(Tuple2<Long, Integer> e, Context ctx, Collector<Long> out)
        throws Exception {
      byte[] b = new byte[PAYLOAD_BYTES];
      new SplittableRandom(e.f0 * 1_000_003L + e.f1).nextBytes(b);
      value.update(b);
      changed++;
    }

    @Override
    public void snapshotState(FunctionSnapshotContext ctx) {
      CHANGED.computeIfAbsent(ctx.getCheckpointId(), id -> new AtomicLong()).addAndGet(changed);
      changed = 0;
    }

    @Override
    public void initializeState(FunctionInitializationContext ctx) {}
  }

  /**
   * The figure's job: a source of {@code (ROUNDS + 1) * PER_ROUND} indexes released {@link
   * #PER_ROUND} per completed checkpoint (Flink's gated rate limiter), so that each checkpoint
   * after the load holds one round of {@link Rounds}, and {@link Rewriter} at parallelism 1.
   */
  private static JobGraph onePercentJob(Configuration conf) {
    StreamExecutionEnvironment env = new StreamExecutionEnvironment(conf);
    // One keyed subtask: one daemon instance, so that each checkpoint's figure is one
    // store's, not the sum of two whose compactions fall into different checkpoints.
    env.setParallelism(1);
    env.setMaxParallelism(128);
    DataGeneratorSource<Long> source =
        new DataGeneratorSource<>(
            new Index(),
            (long) (ROUNDS + 1) * PER_ROUND,
            RateLimiterStrategy.perCheckpoint(PER_ROUND),
            Types.LONG);
    env.fromSource(source, WatermarkStrategy.noWatermarks(), "indexes")
        .setParallelism(1)
        .flatMap(new Rounds())
        .returns(Types.TUPLE(Types.LONG, Types.INT))
        .setParallelism(1)
        .keyBy(t -> t.f0, Types.LONG)
        .process(new Rewriter())
        .returns(Types.LONG)
        .sinkTo(new DiscardingSink<>());
    return env.getStreamGraph().getJobGraph();
  }

  /** The figure of one run: each measured checkpoint's share of the full state it wrote. */
  private record OnePercent(List<Double> shares, List<String> lines, long fullSize) {
    double median() {
      List<Double> sorted = new ArrayList<>(shares);
      sorted.sort(Double::compare);
      int n = sorted.size();
      return n == 0
          ? Double.NaN
          : n % 2 == 1 ? sorted.get(n / 2) : (sorted.get(n / 2 - 1) + sorted.get(n / 2)) / 2;
    }

    double mean() {
      return shares.stream().mapToDouble(Double::doubleValue).average().orElse(Double.NaN);
    }

    long small() {
      return shares.stream().filter(x -> x <= 0.03).count();
    }

    String summary(String backend) {
      return String.format(
          "%s: %d keys x %d B, full state %d bytes; %d checkpoints after 1%% of the keys changed:"
              + " %d wrote at most 3%%, median %.2f%%, mean %.2f%%, min %.2f%%, max %.2f%%%n  %s",
          backend,
          KEYS,
          PAYLOAD_BYTES,
          fullSize,
          shares.size(),
          small(),
          100 * median(),
          100 * mean(),
          100 * shares.stream().mapToDouble(Double::doubleValue).min().orElse(Double.NaN),
          100 * shares.stream().mapToDouble(Double::doubleValue).max().orElse(Double.NaN),
          String.join("\n  ", lines));
    }
  }

  /**
   * Runs {@link #onePercentJob} with {@code c} (a backend with incremental checkpoints) and returns
   * the figure of {@link #MEASURED} checkpoints after the load: the bytes each wrote (Flink's
   * checkpointed size: the new files and the meta streams) against the full state (Flink's state
   * size: every file the checkpoint references). A checkpoint that does not hold exactly one round
   * (the load, or a round split between two) is listed, not measured.
   */
  private static OnePercent onePercent(MiniCluster cluster, Configuration c) throws Exception {
    c.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(100));
    // Time for the completion to reach the source and its next round to reach the
    // keyed operator before the next checkpoint starts: one round per checkpoint.
    c.set(CheckpointingOptions.MIN_PAUSE_BETWEEN_CHECKPOINTS, Duration.ofMillis(200));
    CHANGED.clear();
    JobGraph graph = onePercentJob(c);
    cluster.submitJob(graph).get(1, TimeUnit.MINUTES);
    JobID job = graph.getJobID();
    MiniClusterJobs.await(cluster, job, JOB_TIMEOUT);

    List<Double> shares = new ArrayList<>();
    List<String> lines = new ArrayList<>();
    long fullSize = 0;
    List<AbstractCheckpointStats> all =
        new ArrayList<>(
            MiniClusterJobs.checkpointStats(cluster, job).getHistory().getCheckpoints());
    all.sort((a, b) -> Long.compare(a.getCheckpointId(), b.getCheckpointId()));
    long written = 0;
    for (AbstractCheckpointStats s : all) {
      if (!(s instanceof CompletedCheckpointStats) || shares.size() == MEASURED) {
        continue;
      }
      AtomicLong changed = CHANGED.get(s.getCheckpointId());
      long n = changed == null ? -1 : changed.get();
      boolean loaded = written >= KEYS;
      written += Math.max(n, 0);
      if (!loaded || n != PER_ROUND) {
        lines.add("checkpoint " + s.getCheckpointId() + ": " + n + " changes, not measured");
        continue;
      }
      double share = (double) s.getCheckpointedSize() / s.getStateSize();
      shares.add(share);
      fullSize = s.getStateSize();
      lines.add(
          String.format(
              "checkpoint %d: wrote %d of %d bytes (%.2f%%)",
              s.getCheckpointId(), s.getCheckpointedSize(), s.getStateSize(), 100 * share));
    }
    return new OnePercent(shares, lines, fullSize);
  }

  /**
   * Issue #33's figure inside Flink: after a load of {@link #KEYS} keys, {@link #MEASURED}
   * checkpoints each after exactly 1% of the keys changed, on stated and then, in the same run, on
   * EmbeddedRocksDB's incremental checkpoints. The target: a median of at most 3% of the
   * full state. Pebble compacts level 0 into the level below at four sublevels (as RocksDB at four
   * files), and a compaction of this 11 MB store rewrites all of it, so every fourth checkpoint
   * writes the whole state, on both; the three between write only what changed. Fails if reuse
   * breaks, if level 0 is compacted at every second flush again (Pebble's default), or if stated's
   * mean exceeds 1.2x RocksDB's (the bound for checkpoint bytes).
   */
  @Test
  void checkpointAfterOnePercentChangedWritesLittle(@InjectMiniCluster MiniCluster cluster)
      throws Exception {
    OnePercent stated;
    try (StatedDaemon daemon = startDaemon(tmp)) {
      stated = onePercent(cluster, incremental(daemon, tmp));
    }
    System.out.println(stated.summary("checkpointAfterOnePercentChangedWritesLittle, stated"));
    Configuration c = Backends.ROCKSDB.apply(new Configuration());
    c.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, checkpoints(tmp).toUri().toString());
    c.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
    OnePercent rocksdb = onePercent(cluster, c);
    System.out.println(rocksdb.summary("checkpointAfterOnePercentChangedWritesLittle, rocksdb"));

    for (OnePercent f : List.of(stated, rocksdb)) {
      assertThat(f.shares())
          .as("checkpoints after exactly 1% of the keys changed: " + f.lines())
          .hasSize(MEASURED);
    }
    assertThat(stated.median())
        .as(
            "median share of the full state written by checkpoints after 1% changed: "
                + stated.lines())
        .isLessThanOrEqualTo(0.03);
    assertThat(stated.small())
        .as(
            "checkpoints of "
                + MEASURED
                + " that wrote at most 3% of the full state: "
                + stated.lines())
        .isGreaterThanOrEqualTo(MEASURED * 3 / 5);
    assertThat(stated.mean())
        .as("stated's mean share against 1.2x RocksDB's (%.4f)", rocksdb.mean())
        .isLessThanOrEqualTo(1.2 * rocksdb.mean());
  }
}
