package io.stated.flink.jobs;

import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.execution.RecoveryClaimMode;
import org.apache.flink.runtime.checkpoint.CheckpointStatsSnapshot;
import org.apache.flink.runtime.executiongraph.AccessExecutionGraph;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.jobgraph.SavepointRestoreSettings;
import org.apache.flink.runtime.jobmaster.JobResult;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;

/**
 * Runs {@link KeyedAggregationJob} on a {@link MiniCluster} through its own API (submit, checkpoint
 * stats, savepoints), which the tests and the benchmark share.
 */
public final class MiniClusterJobs {
  private MiniClusterJobs() {}

  /**
   * Builds the job with the given Flink configuration (state backend, checkpoint directory, ...)
   * and submits it; restores from {@code restorePath} (a savepoint or retained checkpoint,
   * NO_CLAIM) unless it is null.
   */
  public static JobID submit(
      MiniCluster cluster,
      Configuration conf,
      JobParams params,
      Sink<Result> sink,
      String restorePath)
      throws Exception {
    StreamExecutionEnvironment env =
        new StreamExecutionEnvironment(KeyedAggregationJob.withDefaults(conf, params));
    KeyedAggregationJob.build(env, params, sink);
    JobGraph graph = env.getStreamGraph().getJobGraph();
    if (restorePath != null) {
      graph.setSavepointRestoreSettings(
          SavepointRestoreSettings.forPath(restorePath, false, RecoveryClaimMode.NO_CLAIM));
    }
    cluster.submitJob(graph).get(1, TimeUnit.MINUTES);
    return graph.getJobID();
  }

  /** Waits for the job to end; throws with the job's own failure if it did not succeed. */
  public static JobResult await(MiniCluster cluster, JobID job, Duration timeout) throws Exception {
    JobResult r = cluster.requestJobResult(job).get(timeout.toMillis(), TimeUnit.MILLISECONDS);
    if (!r.isSuccess()) {
      Throwable cause =
          r.getSerializedThrowable()
              .map(t -> t.deserializeError(MiniClusterJobs.class.getClassLoader()))
              .orElse(null);
      throw new IllegalStateException(
          "job " + job + " ended " + r.getJobStatus().orElse(null), cause);
    }
    return r;
  }

  /** The job's checkpoint statistics, while it runs or after it ended. */
  public static CheckpointStatsSnapshot checkpointStats(MiniCluster cluster, JobID job)
      throws Exception {
    return graph(cluster, job).getCheckpointStatsSnapshot();
  }

  /** The job's execution graph (archived once the job ended). */
  public static AccessExecutionGraph graph(MiniCluster cluster, JobID job) throws Exception {
    return cluster.getExecutionGraph(job).get(1, TimeUnit.MINUTES);
  }

  /**
   * Waits until the job has completed 3 checkpoints and the sink {@code name} ({@link
   * ResultCollectingSink}) holds a tenth of the {@code expected} results, so that what follows (a
   * failure, a savepoint, a killed daemon) lands mid-stream with state and output behind it. A
   * source with a per-checkpoint budget keeps the job from ending meanwhile; should it have ended,
   * this fails rather than let a test pass without having tested anything.
   */
  public static void awaitMidStream(
      MiniCluster cluster, JobID job, String name, int expected, Duration timeout)
      throws Exception {
    awaitCompletedCheckpoints(cluster, job, 3, timeout);
    long deadline = System.nanoTime() + timeout.toNanos();
    ResultSet results = ResultCollectingSink.results(name);
    while (results.size() < expected / 10) {
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException(
            "job "
                + job
                + " emitted "
                + results.size()
                + " results within "
                + timeout
                + ", wanted "
                + expected / 10);
      }
      Thread.sleep(10);
    }
    if (results.size() >= expected) {
      throw new IllegalStateException(
          "job "
              + job
              + " emitted all "
              + expected
              + " results before it was interrupted mid-stream");
    }
  }

  /**
   * Waits until the job has completed at least {@code n} checkpoints in total; fails after {@code
   * timeout} naming the count it reached.
   */
  public static void awaitCompletedCheckpoints(
      MiniCluster cluster, JobID job, long n, Duration timeout) throws Exception {
    long deadline = System.nanoTime() + timeout.toNanos();
    long done = 0;
    while (System.nanoTime() < deadline) {
      CheckpointStatsSnapshot s = checkpointStats(cluster, job);
      done = s == null ? 0 : s.getCounts().getNumberOfCompletedCheckpoints();
      if (done >= n) {
        return;
      }
      Thread.sleep(50);
    }
    throw new IllegalStateException(
        "job " + job + " completed " + done + " checkpoints within " + timeout + ", wanted " + n);
  }
}
