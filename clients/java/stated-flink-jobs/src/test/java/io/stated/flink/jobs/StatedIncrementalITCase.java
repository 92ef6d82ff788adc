package io.stated.flink.jobs;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.flink.api.common.JobID;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
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
 * docs/flink.md) in a MiniCluster, with a daemon of the test's own whose {@code --external-dir} is
 * Flink's checkpoint directory: the daemon's shared files appear in Flink's {@code shared}
 * directory of the job while it runs, an injected failure restores from the last checkpoint
 * (exactly: the output equals {@link ReferenceModel}'s), the shared files of subsumed checkpoints
 * are deleted, and once the job finished and Flink discarded its checkpoints nothing is left in the
 * job's directory: no file, and no directory but the empty {@code shared} and {@code taskowned}
 * ones Flink makes itself.
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

  /**
   * What is left under a job's directory: every file, and every directory but the job's own, {@code
   * shared} and {@code taskowned}, which Flink makes and keeps while the cluster runs.
   */
  private static List<Path> leftovers(Path jobDir) throws IOException {
    if (!Files.exists(jobDir)) {
      return List.of();
    }
    try (Stream<Path> s = Files.walk(jobDir)) {
      return s.filter(
              p ->
                  !p.equals(jobDir)
                      && !p.equals(jobDir.resolve("shared"))
                      && !p.equals(jobDir.resolve("taskowned")))
          .collect(Collectors.toList());
    }
  }

  @Test
  void failureRestoresFromIncrementalCheckpointAndFlinkDeletesFiles(
      @InjectMiniCluster MiniCluster cluster) throws Exception {
    String bin = System.getProperty(StatedDaemon.BIN_PROPERTY, "");
    Assumptions.assumeTrue(
        Backends.statedClassPresent() && !bin.isEmpty(),
        "stated not configured: run with -Pstated -D"
            + StatedDaemon.BIN_PROPERTY
            + "=<stated binary> (scripts/flink-jobs.sh does)");
    Path checkpoints = tmp.resolve("checkpoints");
    Files.createDirectories(checkpoints);
    try (StatedDaemon daemon =
        StatedDaemon.start(
            Path.of(bin),
            tmp.resolve("daemon-" + UUID.randomUUID()),
            "--external-dir",
            checkpoints.toRealPath().toString())) {
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
      c.set(
          CheckpointingOptions.CHECKPOINTS_DIRECTORY, checkpoints.toRealPath().toUri().toString());
      c.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
      c = backend.apply(c);

      JobParams p = KeyedAggregationITCase.params();
      p.failAfterRecords = p.events / p.parallelism / 2;
      String name = "run-" + UUID.randomUUID();
      JobID job =
          MiniClusterJobs.submit(cluster, c, p, new ResultCollectingSink(name, false), null);
      Path jobDir = checkpoints.toRealPath().resolve(job.toString());

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
      ResultSet got = ResultCollectingSink.results(name);
      assertThat(got.diff(ReferenceModel.expected(KeyedAggregationITCase.params())))
          .as("output against the reference model")
          .isEmpty();
      ResultCollectingSink.drop(name);

      // The job finished: Flink discards its checkpoints (asynchronously): the private
      // files and meta data of the last one, its directory (which it deletes without
      // recursion, so a subdirectory there would stop the discard before the shared files),
      // and then every shared file its registry still counts. Nothing may be left.
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      List<Path> left = leftovers(jobDir);
      while (!left.isEmpty() && System.nanoTime() < deadline) {
        Thread.sleep(100);
        left = leftovers(jobDir);
      }
      assertThat(left)
          .as("files and checkpoint directories left after Flink discarded the job's checkpoints")
          .isEmpty();
    }
  }
}
