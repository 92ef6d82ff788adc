package io.stated.flink.jobs;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.flink.api.common.JobID;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.checkpoint.AbstractCheckpointStats;
import org.apache.flink.runtime.checkpoint.CheckpointStatsSnapshot;
import org.apache.flink.runtime.checkpoint.CheckpointStatsStatus;
import org.apache.flink.runtime.checkpoint.RestoredCheckpointStats;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.test.junit5.InjectMiniCluster;
import org.apache.flink.test.junit5.MiniClusterExtension;
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
 *       the job finished and Flink discarded its checkpoints no private file is left. Not yet
 *       asserted: that no shared file is left (see below);
 *   <li>a kill -9 of the daemon while a checkpoint is in progress restores exactly.
 * </ul>
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class StatedIncrementalITCase {
  private static final Duration JOB_TIMEOUT = Duration.ofMinutes(2);

  @RegisterExtension
  static final MiniClusterExtension CLUSTER =
      new MiniClusterExtension(
          new MiniClusterResourceConfiguration.Builder()
              .setNumberTaskManagers(1)
              .setNumberSlotsPerTaskManager(2)
              .build());

  @TempDir static Path tmp;

  /** Every regular file under {@code dir} whose name matches {@code suffix} (all: ""). */
  private static List<Path> files(Path dir, String suffix) throws IOException {
    if (!Files.exists(dir)) {
      return List.of();
    }
    try (Stream<Path> s = Files.walk(dir)) {
      return s.filter(Files::isRegularFile)
          .filter(p -> p.getFileName().toString().endsWith(suffix))
          .collect(Collectors.toList());
    }
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
   * Waits (at most 30 s) until Flink discarded the finished job's checkpoints, which takes their
   * private files, and returns every file left in {@code jobDir}.
   */
  private static List<Path> awaitDiscarded(Path jobDir) throws Exception {
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    List<Path> left = files(jobDir, "");
    while (left.stream().anyMatch(f -> !f.getParent().endsWith("shared"))
        && System.nanoTime() < deadline) {
      Thread.sleep(100);
      left = files(jobDir, "");
    }
    return left;
  }

  /**
   * Prints what is left of the finished job (not asserted: the shared files of the last checkpoint
   * stay, the open bug of docs/flink.md, and a killed upload's files stay by design).
   */
  private static void printLeftovers(String test, Path jobDir) throws Exception {
    List<Path> left = awaitDiscarded(jobDir);
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

      // The job finished: Flink discards its checkpoints (asynchronously), and with them
      // the private files of each. NOT checked: that the shared files go too. They do
      // for RocksDB in the same setup, but here the shared files the last completed
      // checkpoint references stay (an open bug, docs/flink.md), so this test asserts only what
      // holds: no private file (MANIFEST, OPTIONS) is left, and no shared file of any
      // earlier checkpoint.
      List<Path> left = awaitDiscarded(jobDir);
      assertThat(left)
          .as("files other than shared ones left after Flink discarded the job's checkpoints")
          .allMatch(f -> f.getParent().endsWith("shared"));
      // The shared files seen after checkpoint 3 belong to checkpoints Flink subsumed
      // long before the end: its SharedStateRegistry deleted them.
      assertThat(left).as("shared files of subsumed checkpoints").doesNotContainAnyElementsOf(ssts);
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
}
