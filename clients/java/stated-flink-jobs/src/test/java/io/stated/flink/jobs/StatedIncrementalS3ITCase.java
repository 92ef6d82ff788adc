package io.stated.flink.jobs;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.FileNotFoundException;
import java.io.IOException;
import java.net.URLEncoder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.JobID;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.FileStatus;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.runtime.checkpoint.AbstractCheckpointStats;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.test.junit5.InjectMiniCluster;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.io.TempDir;

/**
 * stated's incremental checkpoints with Flink's checkpoint directory on S3 (docs/flink.md): the
 * daemon's {@code --external-dir} is the same {@code s3://} prefix, the daemon writes its files
 * there with its own S3 client, and Flink reads, counts and deletes them with its own S3 file
 * system (flink-s3-fs-presto). An injected failure restores exactly from the last checkpoint, the
 * daemon's SSTs are objects under Flink's {@code shared} prefix of the job while it runs, and once
 * the job finished and Flink discarded its checkpoints no object of the job is left.
 *
 * <p>The S3 server is the one the project's tests start (scripts/s3-server.sh, versitygw), named by
 * {@code STATED_TEST_S3_ENDPOINT}, {@code STATED_TEST_S3_BUCKET} and the {@code AWS_*} credentials;
 * without them the test is skipped, unless {@code STATED_TEST_S3_REQUIRE=1} (as in CI), which makes
 * it fail.
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class StatedIncrementalS3ITCase {
  private static final Duration JOB_TIMEOUT = Duration.ofMinutes(2);

  @RegisterExtension
  static final MiniClusterExtension CLUSTER =
      new MiniClusterExtension(
          new MiniClusterResourceConfiguration.Builder()
              .setNumberTaskManagers(1)
              .setNumberSlotsPerTaskManager(2)
              .build());

  @TempDir static Path tmp;

  /** The test's S3 server, from the environment. */
  private record S3(String endpoint, String bucket, String accessKey, String secretKey) {
    static S3 fromEnv() {
      String endpoint = System.getenv("STATED_TEST_S3_ENDPOINT");
      String bucket = System.getenv("STATED_TEST_S3_BUCKET");
      String key = System.getenv("AWS_ACCESS_KEY_ID");
      String secret = System.getenv("AWS_SECRET_ACCESS_KEY");
      boolean set = endpoint != null && bucket != null && key != null && secret != null;
      String why =
          "no S3 server: set STATED_TEST_S3_ENDPOINT, STATED_TEST_S3_BUCKET, AWS_ACCESS_KEY_ID"
              + " and AWS_SECRET_ACCESS_KEY (scripts/s3-server.sh start prints them)";
      if (!set && "1".equals(System.getenv("STATED_TEST_S3_REQUIRE"))) {
        throw new IllegalStateException(why + "; STATED_TEST_S3_REQUIRE=1 requires one");
      }
      Assumptions.assumeTrue(set, why);
      return new S3(endpoint, bucket, key, secret);
    }
  }

  private static S3 s3;

  /**
   * Flink's S3 file system on the test's server, for the JobManager's and the TaskManager's
   * checkpoint storage and this test's listings (a MiniCluster does not initialize file systems).
   */
  @BeforeAll
  static void fileSystems() {
    s3 = S3.fromEnv();
    Configuration c = new Configuration();
    c.setString("s3.endpoint", s3.endpoint());
    c.setString("s3.path.style.access", "true");
    c.setString("s3.access-key", s3.accessKey());
    c.setString("s3.secret-key", s3.secretKey());
    FileSystem.initialize(c, null);
  }

  @AfterAll
  static void resetFileSystems() {
    FileSystem.initialize(new Configuration(), null);
  }

  /** Every object under {@code dir}, recursively (S3 has no directories: none when empty). */
  private static List<org.apache.flink.core.fs.Path> objects(org.apache.flink.core.fs.Path dir)
      throws IOException {
    List<org.apache.flink.core.fs.Path> out = new ArrayList<>();
    FileStatus[] list;
    try {
      list = dir.getFileSystem().listStatus(dir);
    } catch (FileNotFoundException e) {
      return out;
    }
    if (list == null) {
      return out;
    }
    for (FileStatus f : list) {
      if (f.isDir()) {
        out.addAll(objects(f.getPath()));
      } else {
        out.add(f.getPath());
      }
    }
    return out;
  }

  @Test
  void failureRestoresFromS3AndFlinkDeletesEveryObject(@InjectMiniCluster MiniCluster cluster)
      throws Exception {
    String root = "s3://" + s3.bucket() + "/flink-it-" + UUID.randomUUID();
    String daemonRoot =
        root
            + "?path-style=true&endpoint="
            + URLEncoder.encode(s3.endpoint(), StandardCharsets.UTF_8);
    try (StatedDaemon daemon =
        StatedDaemon.start(
            StatedDaemon.binOrSkip(),
            tmp.resolve("daemon-" + UUID.randomUUID()),
            "--external-dir",
            daemonRoot)) {
      Configuration c = StatedIncrementalITCase.incremental(daemon, tmp);
      c.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, root);
      JobParams p = KeyedAggregationITCase.params();
      p.failAfterRecords = p.events / p.parallelism / 2;
      String name = "run-" + UUID.randomUUID();
      JobID job =
          MiniClusterJobs.submit(cluster, c, p, new ResultCollectingSink(name, false), null);
      org.apache.flink.core.fs.Path jobDir =
          new org.apache.flink.core.fs.Path(root, job.toString());

      // While it runs, the daemon's SSTs are objects under Flink's shared prefix of the job.
      MiniClusterJobs.awaitCompletedCheckpoints(cluster, job, 3, JOB_TIMEOUT);
      List<org.apache.flink.core.fs.Path> shared =
          objects(new org.apache.flink.core.fs.Path(jobDir, "shared"));
      assertThat(shared)
          .as("the daemon's SSTs under Flink's shared prefix of the job on S3")
          .anySatisfy(o -> assertThat(o.getName()).endsWith(".sst"));

      MiniClusterJobs.await(cluster, job, JOB_TIMEOUT);
      StatedIncrementalITCase.assertRestoredFromCheckpoint(cluster, job);
      StatedIncrementalITCase.assertMatchesModel(ResultCollectingSink.results(name));
      ResultCollectingSink.drop(name);

      // The job finished: Flink discards its checkpoints asynchronously, through its S3 file
      // system, the daemon's files with them.
      long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
      List<org.apache.flink.core.fs.Path> left = objects(jobDir);
      while (!left.isEmpty() && System.nanoTime() < deadline) {
        Thread.sleep(200);
        left = objects(jobDir);
      }
      if (!left.isEmpty()) {
        // Which checkpoint the objects belong to, and what became of it, says whose leak it is.
        StringBuilder history = new StringBuilder();
        for (AbstractCheckpointStats cp :
            MiniClusterJobs.checkpointStats(cluster, job).getHistory().getCheckpoints()) {
          history.append(' ').append(cp.getCheckpointId()).append(':').append(cp.getStatus());
        }
        assertThat(left)
            .as(
                "objects left after Flink discarded the job's checkpoints (the job's checkpoints:%s)",
                history)
            .isEmpty();
      }
    }
  }
}
