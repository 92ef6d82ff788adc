package io.stated.flink.jobs;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import org.apache.flink.api.common.JobID;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.ExternalizedCheckpointRetention;
import org.apache.flink.configuration.HeartbeatManagerOptions;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.RestOptions;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.configuration.WebOptions;
import org.apache.flink.runtime.checkpoint.AbstractCheckpointStats;
import org.apache.flink.runtime.checkpoint.CheckpointStatsSnapshot;
import org.apache.flink.runtime.checkpoint.CompletedCheckpointStats;
import org.apache.flink.runtime.checkpoint.RestoredCheckpointStats;
import org.apache.flink.runtime.jobmaster.JobResult;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;
import org.apache.flink.util.FileUtils;
import org.apache.flink.util.ParameterTool;

/**
 * Runs {@link KeyedAggregationJob} on several state backends, one after the other, in one JVM on
 * one machine, at a chosen state size, and prints a table: records/s, checkpoint duration (p50,
 * p99), checkpoint size (full and persisted), and the recovery time after an injected failure. A
 * benchmark, not a test: figures depend on the machine; compare them as ratios.
 *
 * <p>Each backend gets a fresh MiniCluster (1 TaskManager, {@code --parallelism} slots) and one run
 * that fails once when subtask 0 of the keyed operator has processed {@code --fail-at} of its share
 * of the events:
 *
 * <ul>
 *   <li>records/s: records processed before the failure over the time from the first record to the
 *       failure (checkpointing included);
 *   <li>rec/cpu-s: the same records over the CPU time the whole process used meanwhile (all
 *       threads, RocksDB's and ForSt's native ones too), which a busy shared machine disturbs far
 *       less than records/s;
 *   <li>checkpoint duration: end-to-end, over all completed checkpoints of the run;
 *   <li>checkpoint size: of the last completed checkpoint, full state size and the bytes that
 *       checkpoint persisted (smaller when incremental), from Flink's checkpoint statistics (what
 *       the REST API serves at /jobs/:id/checkpoints), and the mean of what each completed
 *       checkpoint persisted (one checkpoint's figure depends on the compactions it caught);
 *   <li>recovery: from the failure until the last keyed subtask has restored its state. With {@code
 *       --restore-parallelism N} (N not {@code --parallelism}) the failure is terminal instead: the
 *       job keeps its last checkpoint (retained on failure), and a second job at parallelism N
 *       restores from it and runs to the end, so recovery is a rescale from a checkpoint (2 -> 3
 *       for RocksDB's incremental checkpoints: their SSTs downloaded and clipped; for stated's
 *       incremental ones: the daemon clips its files by key group).
 * </ul>
 *
 * <p>stated runs once per mode of {@code --stated-modes} (default {@code full}): {@code full} is
 * the backend's default (canonical snapshots through Flink's streams, kind {@code --stated-kind});
 * {@code incremental} is kind lsm with stated's own incremental checkpoints, written by the daemon
 * under its {@code --external-dir}, which must hold {@code --dir} (given as {@code
 * --stated-external-dir}; scripts/flink-bench.sh sets both); {@code incremental-no-read-ahead} is
 * {@code incremental} with {@code state.backend.stated.read-ahead} off, to measure what reading
 * ahead is worth in the same run.
 *
 * <p>The final per-key results of every backend must equal those of the first; the table says so.
 * Usage is in docs/flink.md ("Benchmark") and scripts/flink-bench.sh.
 */
public final class SideBySideBenchmark {
  private SideBySideBenchmark() {}

  /** One row of the table. */
  record Row(
      String backend,
      double recordsPerSecond,
      double recordsPerCpuSecond,
      long checkpoints,
      double p50Ms,
      double p99Ms,
      long fullBytes,
      long persistedBytes,
      double recoveryMs,
      long meanPersistedBytes,
      double wallSeconds,
      String output) {}

  public static void main(String[] args) throws Exception {
    ParameterTool pt = ParameterTool.fromArgs(args);
    long stateMiB = pt.getLong("state-mib", 100);
    int payloadBytes = pt.getInt("payload-bytes", 1024);
    int parallelism = pt.getInt("parallelism", 2);
    double failAt = pt.getDouble("fail-at", 0.8);
    if (stateMiB < 1 || failAt <= 0 || failAt >= 1) {
      throw new IllegalArgumentException(
          "--state-mib must be >= 1 and --fail-at in (0, 1); got " + stateMiB + " and " + failAt);
    }
    JobParams p = new JobParams();
    p.payloadBytes = payloadBytes;
    p.keys = (int) Math.max(1, stateMiB * 1024 * 1024 / payloadBytes);
    p.events = pt.getLong("events", p.keys * 8L);
    p.windowMs = pt.getLong("window-ms", 1000);
    p.parallelism = parallelism;
    p.checkpointIntervalMs = pt.getLong("checkpoint-interval-ms", 150);
    p.failAfterRecords = (long) (failAt * p.events / parallelism);
    p.validate();
    int restoreParallelism = pt.getInt("restore-parallelism", parallelism);
    if (restoreParallelism < 1 || restoreParallelism > p.maxParallelism) {
      throw new IllegalArgumentException(
          "--restore-parallelism must be in [1, "
              + p.maxParallelism
              + "] (the job's maximum parallelism); got "
              + restoreParallelism);
    }
    List<String> statedModes = Arrays.asList(pt.get("stated-modes", "full").split(","));
    for (String m : statedModes) {
      if (!Backend.STATED_MODES.containsKey(m)) {
        throw new IllegalArgumentException(
            "--stated-modes is a list of "
                + String.join(", ", Backend.STATED_MODES.keySet())
                + "; got "
                + statedModes);
      }
    }

    List<String> backends =
        new ArrayList<>(Arrays.asList(pt.get("backends", "hashmap,rocksdb,forst").split(",")));
    String statedNote = statedBackend(pt, backends, statedModes);
    Path dir = pt.has("dir") ? Path.of(pt.get("dir")) : Files.createTempDirectory("flink-bench");
    String managedMemory = pt.get("managed-memory", "512m");

    System.out.printf(
        Locale.ROOT,
        "side-by-side: state %d MiB (%d keys x %d B value state), %d events, parallelism %d,"
            + " checkpoint every %d ms, failure at %.0f%%%s, managed memory %s%n",
        stateMiB,
        p.keys,
        payloadBytes,
        p.events,
        parallelism,
        p.checkpointIntervalMs,
        failAt * 100,
        restoreParallelism == parallelism
            ? ""
            : " (terminal; restored at parallelism " + restoreParallelism + ")",
        managedMemory);
    System.out.println(statedNote);

    List<Row> rows = new ArrayList<>();
    ResultSet reference = null;
    for (String backend : backends) {
      System.out.println("running " + backend + " ...");
      Path runDir = dir.resolve(backend.replaceAll("[^A-Za-z0-9]", "_"));
      Configuration conf = new Configuration();
      boolean stated = Backend.STATED_MODES.containsValue(backend);
      boolean statedIncremental =
          backend.equals(Backend.STATED_INCREMENTAL)
              || backend.equals(Backend.STATED_INCREMENTAL_NO_READ_AHEAD);
      boolean heapTimers = backend.equals(Backend.ROCKSDB_HEAP_TIMERS);
      conf.setString(
          "state.backend.type", stated ? Backend.STATED_FACTORY : heapTimers ? "rocksdb" : backend);
      if (heapTimers) {
        // RocksDB with its timers on the JVM heap, as stated's timer-service heap: Flink writes
        // them into each checkpoint as raw keyed state and reads them back at restore.
        conf.setString("state.backend.rocksdb.timer-service.factory", "HEAP");
      }
      if (stated) {
        conf.setString("state.backend.stated.socket", pt.get("stated-socket"));
        if (pt.has("stated-cache-size")) {
          conf.setString("state.backend.stated.cache-size", pt.get("stated-cache-size"));
        }
        if (pt.has("stated-kind")) {
          conf.setString("state.backend.stated.kind", pt.get("stated-kind"));
        }
        if (pt.has("stated-timer-service")) {
          conf.setString("state.backend.stated.timer-service", pt.get("stated-timer-service"));
        }
      }
      if (backend.equals(Backend.STATED_INCREMENTAL_NO_READ_AHEAD)) {
        conf.setString("state.backend.stated.read-ahead", "false");
      }
      if (statedIncremental) {
        conf.setString("state.backend.stated.kind", "lsm");
        conf.setString("state.backend.stated.incremental", "true");
        conf.setString(
            "state.backend.stated.external-root",
            externalRoot(pt.get("stated-external-dir", ""), runDir.resolve("checkpoints")));
      }
      conf.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
      conf.set(
          CheckpointingOptions.CHECKPOINTS_DIRECTORY,
          runDir.resolve("checkpoints").toUri().toString());
      String name = "bench-" + backend;
      Row row = run(conf, managedMemory, p, restoreParallelism, name, backend);
      ResultSet finals = ResultCollectingSink.results(name);
      String output;
      if (reference == null) {
        reference = finals;
        output = finals.conflicts().isEmpty() ? "reference" : "CONFLICTS";
      } else {
        output = finals.diff(reference.byId()).isEmpty() ? "same" : "DIFFERS";
      }
      rows.add(
          new Row(
              row.backend(),
              row.recordsPerSecond(),
              row.recordsPerCpuSecond(),
              row.checkpoints(),
              row.p50Ms(),
              row.p99Ms(),
              row.fullBytes(),
              row.persistedBytes(),
              row.recoveryMs(),
              row.meanPersistedBytes(),
              row.wallSeconds(),
              output));
      FileUtils.deleteDirectory(runDir.toFile());
    }
    printTable(rows);
    printRatios(rows, "rocksdb");
    printRatios(rows, "forst");
  }

  /**
   * Adds stated, once per mode of {@code modes}, to the backends when asked and possible; returns a
   * line saying what happened.
   */
  private static String statedBackend(ParameterTool pt, List<String> backends, List<String> modes) {
    boolean present;
    try {
      Class.forName(Backend.STATED_FACTORY, false, SideBySideBenchmark.class.getClassLoader());
      present = true;
    } catch (ClassNotFoundException e) {
      present = false;
    }
    String socket = pt.get("stated-socket", System.getProperty("stated.socket", ""));
    if (present && !socket.isEmpty()) {
      for (String m : modes) {
        backends.add(Backend.STATED_MODES.get(m));
      }
      return "stated: included ("
          + Backend.STATED_FACTORY
          + ", socket "
          + socket
          + ", "
          + modes
          + ")";
    }
    if (!socket.isEmpty()) {
      throw new IllegalStateException(
          "--stated-socket is set but "
              + Backend.STATED_FACTORY
              + " is not on the classpath: build with -Pstated (scripts/flink-bench.sh does)");
    }
    return "stated: not run: "
        + (present
            ? "no daemon given (--stated-socket <socket>)"
            : Backend.STATED_FACTORY
                + " is not on the classpath (its backend is not built yet or -Pstated is missing)");
  }

  private static Row run(
      Configuration jobConf,
      String managedMemory,
      JobParams p,
      int restoreParallelism,
      String name,
      String backend)
      throws Exception {
    boolean rescale = restoreParallelism != p.parallelism;
    Configuration clusterConf = new Configuration();
    clusterConf.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, MemorySize.parse(managedMemory));
    clusterConf.set(WebOptions.CHECKPOINTS_HISTORY_SIZE, 100_000);
    clusterConf.set(HeartbeatManagerOptions.HEARTBEAT_TIMEOUT, Duration.ofSeconds(30));
    // Any free port: the default 8081 fails when another MiniCluster on the
    // machine (a test, another benchmark) holds it.
    clusterConf.set(RestOptions.BIND_PORT, "0");
    MiniClusterConfiguration mcc =
        new MiniClusterConfiguration.Builder()
            .setConfiguration(clusterConf)
            .setNumTaskManagers(1)
            .setNumSlotsPerTaskManager(Math.max(p.parallelism, restoreParallelism))
            .build();
    ResultCollectingSink.drop(name);
    RecoveryProbe.reset();
    MiniCluster cluster = new MiniCluster(mcc);
    try {
      cluster.start();
      long start = System.nanoTime();
      CheckpointStatsSnapshot stats;
      if (!rescale) {
        JobID job =
            MiniClusterJobs.submit(cluster, jobConf, p, new ResultCollectingSink(name, true), null);
        MiniClusterJobs.await(cluster, job, Duration.ofHours(2));
        stats = MiniClusterJobs.checkpointStats(cluster, job);
      } else {
        stats = runAndRescale(cluster, jobConf, p, restoreParallelism, name, backend);
      }
      double wall = (System.nanoTime() - start) / 1e9;

      List<AbstractCheckpointStats> done = new ArrayList<>();
      for (AbstractCheckpointStats c : stats.getHistory().getCheckpoints()) {
        if (c.getStatus().isCompleted() && !c.getProperties().isSavepoint()) {
          done.add(c);
        }
      }
      done.sort(Comparator.comparingLong(AbstractCheckpointStats::getCheckpointId));
      long[] durations =
          done.stream().mapToLong(AbstractCheckpointStats::getEndToEndDuration).sorted().toArray();
      long failed = RecoveryProbe.FAILED_NANOS.get();
      long restored = RecoveryProbe.RESTORED_NANOS.get();
      long restores = RecoveryProbe.RESTORES.get();
      if (failed == 0 || restored < failed || restores < restoreParallelism) {
        throw new IllegalStateException(
            backend
                + ": the injected failure or the restore of every keyed subtask did not happen"
                + " (failed="
                + failed
                + ", restored="
                + restored
                + ", subtasks restored="
                + restores
                + " of "
                + restoreParallelism
                + ")");
      }
      double rps =
          RecoveryProbe.PROCESSED_AT_FAILURE.get()
              / ((failed - RecoveryProbe.FIRST_RECORD_NANOS.get()) / 1e9);
      // Sizes are those of the checkpoint the job restored from: the last one completed
      // before the failure, with the state at its full size (after a rescale, the first
      // job's last one, which the second job restored).
      long cpu = RecoveryProbe.FAILED_CPU_NANOS.get() - RecoveryProbe.FIRST_RECORD_CPU_NANOS.get();
      double rpcs = cpu <= 0 ? Double.NaN : RecoveryProbe.PROCESSED_AT_FAILURE.get() / (cpu / 1e9);
      RestoredCheckpointStats r = stats.getLatestRestoredCheckpoint();
      long restoredId = -1;
      if (r != null) {
        restoredId = r.getCheckpointId();
      } else if (rescale && !done.isEmpty()) {
        restoredId = done.get(done.size() - 1).getCheckpointId();
      }
      AbstractCheckpointStats sized = null;
      for (AbstractCheckpointStats c : done) {
        if (c.getCheckpointId() == restoredId) {
          sized = c;
        }
      }
      return new Row(
          backend,
          rps,
          rpcs,
          durations.length,
          percentile(durations, 0.50),
          percentile(durations, 0.99),
          sized == null ? -1 : sized.getStateSize(),
          sized == null ? -1 : sized.getCheckpointedSize(),
          (restored - failed) / 1e6,
          (long)
              done.stream()
                  .mapToLong(AbstractCheckpointStats::getCheckpointedSize)
                  .average()
                  .orElse(-1),
          wall,
          "");
    } finally {
      cluster.closeAsync().get();
    }
  }

  /**
   * The rescale variant of a run: the job at {@code p.parallelism} fails for good at the injected
   * failure, keeping its last completed checkpoint; a second job at {@code restoreParallelism}
   * restores from it (NO_CLAIM) and runs to the end into the same result sink. Returns the first
   * job's checkpoint statistics (the throughput, checkpoint and size figures are of that job).
   */
  private static CheckpointStatsSnapshot runAndRescale(
      MiniCluster cluster,
      Configuration jobConf,
      JobParams p,
      int restoreParallelism,
      String name,
      String backend)
      throws Exception {
    Configuration first = new Configuration(jobConf);
    first.set(
        CheckpointingOptions.EXTERNALIZED_CHECKPOINT_RETENTION,
        ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION);
    first.set(RestartStrategyOptions.RESTART_STRATEGY, "none");
    JobID job =
        MiniClusterJobs.submit(cluster, first, p, new ResultCollectingSink(name, true), null);
    JobResult r = cluster.requestJobResult(job).get(2, java.util.concurrent.TimeUnit.HOURS);
    if (r.isSuccess() || RecoveryProbe.FAILED_NANOS.get() == 0) {
      throw new IllegalStateException(
          backend
              + ": the first job ended "
              + r.getJobStatus().orElse(null)
              + " without the"
              + " injected failure, so there is no checkpoint to rescale from");
    }
    CheckpointStatsSnapshot stats = MiniClusterJobs.checkpointStats(cluster, job);
    CompletedCheckpointStats last = stats.getHistory().getLatestCompletedCheckpoint();
    if (last == null || last.getExternalPath() == null) {
      throw new IllegalStateException(
          backend + ": the failed job left no retained checkpoint to rescale from");
    }
    JobParams q = p.copy();
    q.parallelism = restoreParallelism;
    q.failAfterRecords = 0;
    JobID second =
        MiniClusterJobs.submit(
            cluster, jobConf, q, new ResultCollectingSink(name, true), last.getExternalPath());
    MiniClusterJobs.await(cluster, second, Duration.ofHours(2));
    // The restored checkpoint's statistics live in the second job; the sizes reported are
    // those of the checkpoint it restored, which is the first job's last.
    return stats;
  }

  /**
   * The daemon's directory for the files of stated's incremental checkpoints of a job whose
   * checkpoint directory is {@code checkpoints}, relative to the daemon's {@code --external-dir}:
   * the daemon writes under {@code <external-dir>/<root>/<job id>}, which is then Flink's own
   * directory of the job.
   */
  static String externalRoot(String externalDir, Path checkpoints) throws java.io.IOException {
    if (externalDir.isEmpty()) {
      throw new IllegalArgumentException(
          "--stated-modes incremental needs --stated-external-dir, the daemon's --external-dir,"
              + " with --dir under it (scripts/flink-bench.sh sets both)");
    }
    Files.createDirectories(checkpoints);
    Path ext = Path.of(externalDir).toRealPath();
    Path cp = checkpoints.toRealPath();
    if (!cp.startsWith(ext)) {
      throw new IllegalArgumentException(
          "the checkpoint directory "
              + cp
              + " is not under the daemon's --external-dir "
              + ext
              + ": give --dir a directory under --stated-external-dir");
    }
    return ext.relativize(cp).toString();
  }

  static double percentile(long[] sorted, double q) {
    if (sorted.length == 0) {
      return Double.NaN;
    }
    int i = (int) Math.ceil(q * sorted.length) - 1;
    return sorted[Math.max(0, Math.min(sorted.length - 1, i))];
  }

  private static void printTable(List<Row> rows) {
    String header =
        String.format(
            Locale.ROOT,
            "%-10s %10s %12s %6s %10s %10s %12s %14s %14s %12s %10s %9s",
            "backend",
            "records/s",
            "rec/cpu-s",
            "ckpts",
            "ckpt p50",
            "ckpt p99",
            "ckpt full",
            "ckpt persisted",
            "persisted/ckpt",
            "recovery",
            "wall",
            "output");
    System.out.println();
    System.out.println(header);
    System.out.println("-".repeat(header.length()));
    for (Row r : rows) {
      System.out.println(
          String.format(
              Locale.ROOT,
              "%-10s %10.0f %12.0f %6d %8.0fms %8.0fms %12s %14s %14s %10.0fms %9.1fs %9s",
              r.backend(),
              r.recordsPerSecond(),
              r.recordsPerCpuSecond(),
              r.checkpoints(),
              r.p50Ms(),
              r.p99Ms(),
              mib(r.fullBytes()),
              mib(r.persistedBytes()),
              mib(r.meanPersistedBytes()),
              r.recoveryMs(),
              r.wallSeconds(),
              r.output()));
    }
  }

  /**
   * Each backend's throughput (records/s and rec/cpu-s) and recovery time as ratios to those of
   * {@code base} in the same run: above 1 is faster for throughput, slower for recovery.
   */
  private static void printRatios(List<Row> rows, String base) {
    Row b = null;
    for (Row r : rows) {
      if (r.backend().equals(base)) {
        b = r;
      }
    }
    if (b == null) {
      return;
    }
    System.out.println();
    String header =
        String.format(
            Locale.ROOT,
            "%-10s %14s %14s %14s",
            "vs " + base,
            "records/s",
            "rec/cpu-s",
            "recovery");
    System.out.println(header);
    System.out.println("-".repeat(header.length()));
    for (Row r : rows) {
      System.out.println(
          String.format(
              Locale.ROOT,
              "%-10s %13.2fx %13.2fx %13.2fx",
              r.backend(),
              r.recordsPerSecond() / b.recordsPerSecond(),
              r.recordsPerCpuSecond() / b.recordsPerCpuSecond(),
              r.recoveryMs() / b.recoveryMs()));
    }
  }

  private static String mib(long bytes) {
    return bytes < 0 ? "n/a" : String.format(Locale.ROOT, "%.1f MiB", bytes / 1048576.0);
  }

  /** The stated factory's name, kept here so the benchmark needs no stated class to compile. */
  static final class Backend {
    static final String STATED_FACTORY = "io.stated.flink.StatedStateBackendFactory";

    /** The row of stated's default mode: full snapshots through Flink's streams. */
    static final String STATED = "stated";

    /** The row of stated's own incremental checkpoints (kind lsm, files owned by Flink). */
    static final String STATED_INCREMENTAL = "stated-inc";

    /** {@link #STATED_INCREMENTAL} without reading ahead ({@code read-ahead: false}). */
    static final String STATED_INCREMENTAL_NO_READ_AHEAD = "stated-inc-nra";

    /** The rows of {@code --stated-modes}, by mode. */
    static final Map<String, String> STATED_MODES =
        new TreeMap<>(
            Map.of(
                "full",
                STATED,
                "incremental",
                STATED_INCREMENTAL,
                "incremental-no-read-ahead",
                STATED_INCREMENTAL_NO_READ_AHEAD));

    /**
     * EmbeddedRocksDB with {@code state.backend.rocksdb.timer-service.factory: HEAP}: timers kept
     * as stated's {@code timer-service: heap} keeps them, to compare recoveries with heap timers.
     */
    static final String ROCKSDB_HEAP_TIMERS = "rocksdb-heap-timers";

    private Backend() {}
  }
}
