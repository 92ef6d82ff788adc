package io.stated.flink.jobs;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.apache.flink.api.common.JobID;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.HeartbeatManagerOptions;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.checkpoint.RestoredCheckpointStats;
import org.apache.flink.runtime.executiongraph.AccessExecutionGraph;
import org.apache.flink.runtime.highavailability.nonha.embedded.HaLeadershipControl;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.test.junit5.InjectMiniCluster;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * The example job in a MiniCluster (2 TaskManagers x 2 slots, HA with leadership control) on each
 * state backend: without failures, with an injected failure, with a TaskManager lost, stopped with
 * a savepoint and restored at other parallelisms, moved between backends through a canonical
 * savepoint, and across a JobManager failover. Every run's output must equal {@link
 * ReferenceModel}'s, which is computed without Flink; repeats after a restore must be identical to
 * the first emission (see {@link ResultSet}), so state counted twice or lost fails the test.
 *
 * <p>stated joins every backend-parameterized test when configured; see {@link Backends}.
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class KeyedAggregationITCase {
  private static final Duration JOB_TIMEOUT = Duration.ofMinutes(2);

  @RegisterExtension
  static final MiniClusterExtension CLUSTER =
      new MiniClusterExtension(
          new MiniClusterResourceConfiguration.Builder()
              .setConfiguration(clusterConfig())
              .setNumberTaskManagers(2)
              .setNumberSlotsPerTaskManager(2)
              .withHaLeadershipControl()
              .build());

  @TempDir static Path tmp;

  private static Configuration clusterConfig() {
    Configuration c = new Configuration();
    // RocksDB and ForSt take their memory from managed memory; keep it small on CI.
    c.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, MemorySize.ofMebiBytes(128));
    // Spread slots over both TaskManagers, so that losing one always loses running tasks.
    c.set(
        TaskManagerOptions.TASK_MANAGER_LOAD_BALANCE_MODE,
        TaskManagerOptions.TaskManagerLoadBalanceMode.SLOTS);
    // Notice a lost TaskManager or JobManager in seconds, not the default 50 s.
    c.set(HeartbeatManagerOptions.HEARTBEAT_INTERVAL, Duration.ofMillis(500));
    c.set(HeartbeatManagerOptions.HEARTBEAT_TIMEOUT, Duration.ofSeconds(4));
    return c;
  }

  /**
   * The test job: small enough for CI (a few seconds per run), with windows of several events per
   * key so that list and map state hold more than one entry. The source emits 800 events per
   * completed checkpoint, so every run spans 15 checkpoints however loaded the machine is, and a
   * failure or savepoint after the first few lands mid-stream (a rate in events per second did not:
   * on a busy machine a checkpoint can take as long as the whole job).
   */
  static JobParams params() {
    JobParams p = new JobParams();
    p.events = 12_000;
    p.keys = 40;
    p.payloadBytes = 64;
    p.windowMs = 200;
    p.recordsPerCheckpoint = 800;
    p.parallelism = 2;
    p.checkpointIntervalMs = 100;
    return p.validate();
  }

  private static Map<String, Result> expected;
  private static int taskManagerKills;

  @BeforeAll
  static void setUp() {
    System.out.println("KeyedAggregationITCase: " + Backends.statedStatus());
    expected = ReferenceModel.expected(params());
  }

  static Stream<Backends.Backend> allBackends() {
    return Backends.with(Backends.HASHMAP, Backends.ROCKSDB, Backends.FORST).stream();
  }

  static Stream<Backends.Backend> mainBackends() {
    return Backends.with(Backends.HASHMAP, Backends.ROCKSDB).stream();
  }

  /**
   * Pairs of backends a canonical savepoint moves between. ForSt is not among them: Flink 2.3.0's
   * ForSt refuses to take one ("Configured state backend (ForStStateBackend...) does not support
   * CANONICAL savepoints").
   */
  static Stream<Arguments> backendPairs() {
    List<Arguments> l = new ArrayList<>();
    l.add(Arguments.of(Backends.HASHMAP, Backends.ROCKSDB));
    l.add(Arguments.of(Backends.ROCKSDB, Backends.HASHMAP));
    Backends.Backend stated = Backends.stated();
    if (stated != null) {
      l.add(Arguments.of(stated, Backends.ROCKSDB));
      // Flink's backends write their timers into a canonical savepoint as
      // PRIORITY_QUEUE states (RocksDB even with heap timers); stated's restore loads
      // them into its JVM-side timer queues.
      l.add(Arguments.of(Backends.ROCKSDB, stated));
      l.add(Arguments.of(Backends.HASHMAP, stated));
    }
    return l.stream();
  }

  private static Configuration jobConfig(Backends.Backend backend) {
    Configuration c = new Configuration();
    c.set(
        CheckpointingOptions.CHECKPOINTS_DIRECTORY, tmp.resolve("checkpoints").toUri().toString());
    c.set(CheckpointingOptions.INCREMENTAL_CHECKPOINTS, true);
    return backend.apply(c);
  }

  private static String runName() {
    return "run-" + UUID.randomUUID();
  }

  private static void assertBackend(MiniCluster cluster, JobID job, Backends.Backend backend)
      throws Exception {
    AccessExecutionGraph g = MiniClusterJobs.graph(cluster, job);
    if (backend.expectedName() != null) {
      assertThat(g.getStateBackendName())
          .as("state backend of job")
          .contains(backend.expectedName());
    } else {
      assertThat(g.getStateBackendName()).as("state backend of job").isPresent();
    }
  }

  private static void assertRestoredFromCheckpoint(MiniCluster cluster, JobID job)
      throws Exception {
    RestoredCheckpointStats restored =
        MiniClusterJobs.checkpointStats(cluster, job).getLatestRestoredCheckpoint();
    assertThat(restored).as("the job restored from a checkpoint").isNotNull();
    assertThat(restored.getCheckpointId()).isPositive();
  }

  private static void awaitMidStream(MiniCluster cluster, JobID job, String name) throws Exception {
    MiniClusterJobs.awaitMidStream(cluster, job, name, expected.size(), JOB_TIMEOUT);
  }

  private static void assertMatchesModel(ResultSet got) {
    assertThat(got.diff(expected)).as("output against the reference model").isEmpty();
  }

  @Test
  void modelIsNotTrivial() {
    long windows = expected.values().stream().filter(r -> r.kind.equals(Result.WINDOW)).count();
    long finals = expected.values().stream().filter(r -> r.kind.equals(Result.FINAL)).count();
    long multi =
        expected.values().stream().filter(r -> r.kind.equals(Result.WINDOW) && r.count > 2).count();
    assertThat(finals).isEqualTo(params().keys);
    assertThat(windows).isGreaterThan(1000);
    assertThat(multi)
        .as("windows with several events (list state holds several entries)")
        .isGreaterThan(500);
    assertThat(
            expected.values().stream()
                .mapToLong(r -> r.kind.equals(Result.FINAL) ? r.count : 0)
                .sum())
        .isEqualTo(params().events);
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("allBackends")
  void runWithoutFailuresMatchesModel(
      Backends.Backend backend, @InjectMiniCluster MiniCluster cluster) throws Exception {
    String name = runName();
    JobID job =
        MiniClusterJobs.submit(
            cluster, jobConfig(backend), params(), new ResultCollectingSink(name, false), null);
    MiniClusterJobs.await(cluster, job, JOB_TIMEOUT);
    assertBackend(cluster, job, backend);
    ResultSet got = ResultCollectingSink.results(name);
    assertMatchesModel(got);
    assertThat(got.emitted())
        .as("no failure, so no result is emitted twice")
        .isEqualTo(expected.size());
    assertThat(
            MiniClusterJobs.checkpointStats(cluster, job)
                .getCounts()
                .getNumberOfCompletedCheckpoints())
        .as("checkpoints completed during the run")
        .isGreaterThanOrEqualTo(3);
    ResultCollectingSink.drop(name);
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("allBackends")
  void injectedFailureRestoresFromLastCheckpoint(
      Backends.Backend backend, @InjectMiniCluster MiniCluster cluster) throws Exception {
    JobParams p = params();
    p.failAfterRecords = p.events / p.parallelism / 2;
    String name = runName();
    JobID job =
        MiniClusterJobs.submit(
            cluster, jobConfig(backend), p, new ResultCollectingSink(name, false), null);
    MiniClusterJobs.await(cluster, job, JOB_TIMEOUT);
    assertRestoredFromCheckpoint(cluster, job);
    ResultSet got = ResultCollectingSink.results(name);
    assertMatchesModel(got);
    ResultCollectingSink.drop(name);
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("mainBackends")
  void taskManagerLossRestoresFromLastCheckpoint(
      Backends.Backend backend, @InjectMiniCluster MiniCluster cluster) throws Exception {
    String name = runName();
    JobID job =
        MiniClusterJobs.submit(
            cluster, jobConfig(backend), params(), new ResultCollectingSink(name, false), null);
    awaitMidStream(cluster, job, name);
    // MiniCluster never reuses a TaskManager index; each test kills the oldest live one and
    // starts a replacement, so the k-th kill takes index k.
    cluster.terminateTaskManager(taskManagerKills++).get(1, TimeUnit.MINUTES);
    cluster.startTaskManager();
    MiniClusterJobs.await(cluster, job, JOB_TIMEOUT);
    assertRestoredFromCheckpoint(cluster, job);
    assertMatchesModel(ResultCollectingSink.results(name));
    ResultCollectingSink.drop(name);
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("mainBackends")
  void stopWithSavepointAtTwoRestoresAtThreeAndOne(
      Backends.Backend backend, @InjectMiniCluster MiniCluster cluster) throws Exception {
    String first = runName();
    JobID job =
        MiniClusterJobs.submit(
            cluster, jobConfig(backend), params(), new ResultCollectingSink(first, false), null);
    awaitMidStream(cluster, job, first);
    String savepoint =
        cluster
            .stopWithSavepoint(
                job,
                tmp.resolve("savepoints").toUri().toString(),
                false,
                SavepointFormatType.CANONICAL)
            .get(1, TimeUnit.MINUTES);
    ResultSet before = ResultCollectingSink.results(first);
    assertThat(before.size())
        .as("results before the savepoint")
        .isPositive()
        .isLessThan(expected.size());

    for (int parallelism : new int[] {3, 1}) {
      JobParams p = params();
      p.parallelism = parallelism;
      String name = runName();
      JobID restored =
          MiniClusterJobs.submit(
              cluster, jobConfig(backend), p, new ResultCollectingSink(name, false), savepoint);
      MiniClusterJobs.await(cluster, restored, JOB_TIMEOUT);
      ResultSet all = ResultCollectingSink.results(name);
      all.addAll(before);
      assertThat(all.diff(expected)).as("savepoint at 2, restored at " + parallelism).isEmpty();
      ResultCollectingSink.drop(name);
    }
    ResultCollectingSink.drop(first);
  }

  @ParameterizedTest(name = "{0} to {1}")
  @MethodSource("backendPairs")
  void canonicalSavepointMovesBetweenBackends(
      Backends.Backend from, Backends.Backend to, @InjectMiniCluster MiniCluster cluster)
      throws Exception {
    String first = runName();
    JobID job =
        MiniClusterJobs.submit(
            cluster, jobConfig(from), params(), new ResultCollectingSink(first, false), null);
    awaitMidStream(cluster, job, first);
    String savepoint =
        cluster
            .stopWithSavepoint(
                job,
                tmp.resolve("savepoints").toUri().toString(),
                false,
                SavepointFormatType.CANONICAL)
            .get(1, TimeUnit.MINUTES);
    ResultSet before = ResultCollectingSink.results(first);
    assertThat(before.size()).isPositive().isLessThan(expected.size());

    String second = runName();
    JobID restored =
        MiniClusterJobs.submit(
            cluster, jobConfig(to), params(), new ResultCollectingSink(second, false), savepoint);
    MiniClusterJobs.await(cluster, restored, JOB_TIMEOUT);
    assertBackend(cluster, restored, to);
    ResultSet all = ResultCollectingSink.results(second);
    all.addAll(before);
    assertThat(all.diff(expected)).as(from + " savepoint restored on " + to).isEmpty();
    ResultCollectingSink.drop(first);
    ResultCollectingSink.drop(second);
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("mainBackends")
  void jobManagerFailoverRestoresFromLastCheckpoint(
      Backends.Backend backend, @InjectMiniCluster MiniCluster cluster) throws Exception {
    HaLeadershipControl ha = cluster.getHaLeadershipControl().orElseThrow();
    String name = runName();
    JobID job =
        MiniClusterJobs.submit(
            cluster, jobConfig(backend), params(), new ResultCollectingSink(name, false), null);
    awaitMidStream(cluster, job, name);
    ha.revokeJobMasterLeadership(job).get(1, TimeUnit.MINUTES);
    ha.grantJobMasterLeadership(job).get(1, TimeUnit.MINUTES);
    MiniClusterJobs.await(cluster, job, JOB_TIMEOUT);
    assertRestoredFromCheckpoint(cluster, job);
    assertMatchesModel(ResultCollectingSink.results(name));
    ResultCollectingSink.drop(name);
  }

  /**
   * kill -9 of the daemon mid-job, then a new daemon on the same socket and data dir: the task
   * fails on the lost connection, Flink restarts it from the last completed checkpoint, whose
   * handles load the new daemon, and the output is exactly the model's. The test runs its own
   * daemon (the binary named by {@code stated.bin}), not the shared one of {@link Backends}, since
   * it kills it.
   */
  @Test
  void daemonKilledMidJobRecoversFromLastCheckpoint(@InjectMiniCluster MiniCluster cluster)
      throws Exception {
    Path bin = StatedDaemon.binOrSkip();
    try (StatedDaemon daemon =
        StatedDaemon.start(bin, tmp.resolve("killed-daemon-" + UUID.randomUUID()))) {
      Configuration c = StatedDaemon.restartsOutlastingKill(jobConfig(daemon.backend()));
      String name = runName();
      JobID job =
          MiniClusterJobs.submit(cluster, c, params(), new ResultCollectingSink(name, false), null);
      awaitMidStream(cluster, job, name);
      daemon.kill9();
      daemon.restart();
      MiniClusterJobs.await(cluster, job, JOB_TIMEOUT);
      assertRestoredFromCheckpoint(cluster, job);
      assertMatchesModel(ResultCollectingSink.results(name));
      ResultCollectingSink.drop(name);
    }
  }
}
