package io.stated.flink.jobs;

import java.nio.file.Path;
import java.time.Duration;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.JobID;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.HeartbeatManagerOptions;
import org.apache.flink.runtime.highavailability.nonha.embedded.HaLeadershipControl;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.test.junit5.InjectMiniCluster;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.io.TempDir;

/**
 * A JobManager failover of the example job on stated's incremental checkpoints. Its own
 * MiniCluster, with HA leadership control: that cluster's checkpoint store keeps a finished job's
 * last checkpoint (it stands in for HA storage that survives the JobManager), which would break
 * {@link StatedIncrementalITCase}'s check that Flink deletes the private files.
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class StatedIncrementalFailoverITCase {
  private static final Duration JOB_TIMEOUT = Duration.ofMinutes(2);

  @RegisterExtension
  static final MiniClusterExtension CLUSTER =
      new MiniClusterExtension(
          new MiniClusterResourceConfiguration.Builder()
              .setConfiguration(clusterConfig())
              .setNumberTaskManagers(1)
              .setNumberSlotsPerTaskManager(2)
              .withHaLeadershipControl()
              .build());

  @TempDir static Path tmp;

  private static Configuration clusterConfig() {
    Configuration c = new Configuration();
    // Notice a revoked JobManager in seconds, not the default 50 s.
    c.set(HeartbeatManagerOptions.HEARTBEAT_INTERVAL, Duration.ofMillis(500));
    c.set(HeartbeatManagerOptions.HEARTBEAT_TIMEOUT, Duration.ofSeconds(4));
    return c;
  }

  /**
   * The JobMaster's leadership revoked and granted again mid-stream: the new JobMaster restores
   * from the last completed checkpoint, building Flink's shared state registry again from its
   * handles, the tasks' new instances load the daemon's files, and the output is exactly {@link
   * ReferenceModel}'s.
   */
  @Test
  void jobManagerFailoverRestoresExactly(@InjectMiniCluster MiniCluster cluster) throws Exception {
    try (StatedDaemon daemon = StatedIncrementalITCase.startDaemon(tmp)) {
      HaLeadershipControl ha = cluster.getHaLeadershipControl().orElseThrow();
      String name = "run-" + UUID.randomUUID();
      JobID job =
          MiniClusterJobs.submit(
              cluster,
              StatedIncrementalITCase.incremental(daemon, tmp),
              KeyedAggregationITCase.params(),
              new ResultCollectingSink(name, false),
              null);
      MiniClusterJobs.awaitMidStream(
          cluster,
          job,
          name,
          ReferenceModel.expected(KeyedAggregationITCase.params()).size(),
          JOB_TIMEOUT);
      ha.revokeJobMasterLeadership(job).get(1, TimeUnit.MINUTES);
      ha.grantJobMasterLeadership(job).get(1, TimeUnit.MINUTES);
      MiniClusterJobs.await(cluster, job, JOB_TIMEOUT);
      StatedIncrementalITCase.assertRestoredFromCheckpoint(cluster, job);
      StatedIncrementalITCase.assertMatchesModel(ResultCollectingSink.results(name));
      ResultCollectingSink.drop(name);
    }
  }
}
