package io.stated.flink.jobs;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.api.common.state.v2.ListState;
import org.apache.flink.api.common.state.v2.ListStateDescriptor;
import org.apache.flink.api.common.state.v2.MapState;
import org.apache.flink.api.common.state.v2.MapStateDescriptor;
import org.apache.flink.api.common.state.v2.ReducingState;
import org.apache.flink.api.common.state.v2.ReducingStateDescriptor;
import org.apache.flink.api.common.state.v2.StateFuture;
import org.apache.flink.api.common.state.v2.ValueState;
import org.apache.flink.api.common.state.v2.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.core.execution.RecoveryClaimMode;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.core.state.StateFutureUtils;
import org.apache.flink.runtime.checkpoint.RestoredCheckpointStats;
import org.apache.flink.runtime.jobgraph.JobGraph;
import org.apache.flink.runtime.jobgraph.SavepointRestoreSettings;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.testutils.MiniClusterResourceConfiguration;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.operators.StreamingRuntimeContext;
import org.apache.flink.test.junit5.InjectMiniCluster;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.apache.flink.util.Collector;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;

/**
 * A keyed job on Flink's asynchronous state API ({@code enableAsyncState()}, State V2 value,
 * reducing, list and map state, every access a chain of futures) through an injected failure, on
 * hashmap (Flink's adaptor over its synchronous backend), ForSt (its asynchronous backend) and
 * stated (its asynchronous backend) when configured ({@link Backends}).
 *
 * <p>Per event the operator counts the key's events (value), adds the value to the key's sum
 * (reducing), appends it to the key's current run of up to ten values (list, cleared at every tenth
 * event) and puts it into one of seven buckets (map), then reads all four back and emits them,
 * keyed by the key's event number. The output is a function of the input alone, computed here
 * without Flink; a result emitted again after the restore must equal its first emission.
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class AsyncStateITCase {
  private static final Duration JOB_TIMEOUT = Duration.ofMinutes(2);

  @RegisterExtension
  static final MiniClusterExtension CLUSTER =
      new MiniClusterExtension(
          new MiniClusterResourceConfiguration.Builder()
              .setConfiguration(clusterConfig())
              .setNumberTaskManagers(1)
              // 3 for the restore at parallelism 3.
              .setNumberSlotsPerTaskManager(3)
              .build());

  @TempDir static Path tmp;

  private static Configuration clusterConfig() {
    Configuration c = new Configuration();
    c.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, MemorySize.ofMebiBytes(128));
    return c;
  }

  static JobParams params() {
    JobParams p = new JobParams();
    p.events = 8_000;
    p.keys = 40;
    p.recordsPerCheckpoint = 800;
    p.parallelism = 2;
    p.checkpointIntervalMs = 100;
    return p.validate();
  }

  /**
   * {@link #params()} at a quarter of the rate: 40 checkpoints per run, so that a stop or a kill
   * issued after the third lands mid-stream however fast the job runs (at 800 events per checkpoint
   * the job ended before a stop-with-savepoint reached it).
   */
  static JobParams interruptedParams() {
    JobParams p = params();
    p.recordsPerCheckpoint = 200;
    return p.validate();
  }

  private static Map<String, Result> expected;

  @BeforeAll
  static void setUp() {
    System.out.println("AsyncStateITCase: " + Backends.statedStatus());
    expected = model(params());
  }

  static Stream<Backends.Backend> backends() {
    return Backends.with(Backends.HASHMAP, Backends.FORST).stream();
  }

  /** The output computed without Flink: the source's events in order, per key. */
  static Map<String, Result> model(JobParams p) {
    EventGenerator gen = new EventGenerator(p);
    Map<Long, long[]> perKey = new HashMap<>();
    Map<Long, long[]> buckets = new HashMap<>();
    Map<String, Result> out = new HashMap<>();
    for (long i = 0; i < p.events; i++) {
      Event e = gen.map(i);
      // count, sum, run sum
      long[] s = perKey.computeIfAbsent(e.key, k -> new long[3]);
      long[] b = buckets.computeIfAbsent(e.key, k -> new long[7]);
      s[0]++;
      s[1] += e.value;
      s[2] = s[0] % 10 == 0 ? 0 : s[2] + e.value;
      b[(int) (s[0] % 7)] = e.value;
      long mapSum = 0;
      for (long v : b) {
        mapSum += v;
      }
      Result r = new Result(Result.WINDOW, e.key, s[0], s[0], s[1], s[2], mapSum, 0, 0, 0);
      out.put(r.id(), r);
    }
    return out;
  }

  @ParameterizedTest(name = "{0}")
  @MethodSource("backends")
  void injectedFailureRestoresFromLastCheckpoint(
      Backends.Backend backend, @InjectMiniCluster MiniCluster cluster) throws Exception {
    JobParams p = params();
    p.failAfterRecords = p.events / p.parallelism / 2;
    String name = runName();
    JobID job = submit(cluster, backend.apply(jobConfig()), p, name, null);
    MiniClusterJobs.await(cluster, job, JOB_TIMEOUT);

    assertBackend(cluster, job, backend);
    assertRestoredFromCheckpoint(cluster, job);
    ResultSet got = ResultCollectingSink.results(name);
    assertMatchesModel(got);
    assertThat(got.emitted())
        .as("the restore replayed some results")
        .isGreaterThan(expected.size());
    ResultCollectingSink.drop(name);
  }

  /**
   * Stopped with a savepoint at parallelism 2 mid-stream, then restored from it at 3 and,
   * separately, at 1: each restored run's output and the first run's together must be the model's,
   * as a run without any stop. The savepoint is a native one: Flink 2.3.0 refuses a canonical
   * savepoint of any operator with {@code enableAsyncState()}, whatever the backend ({@code
   * StreamOperatorStateHandler.snapshotState}: "Not supported yet").
   */
  @ParameterizedTest(name = "{0}")
  @MethodSource("backends")
  void stopWithSavepointAtTwoRestoresAtThreeAndOne(
      Backends.Backend backend, @InjectMiniCluster MiniCluster cluster) throws Exception {
    String first = runName();
    JobID job = submit(cluster, backend.apply(jobConfig()), interruptedParams(), first, null);
    MiniClusterJobs.awaitMidStream(cluster, job, first, expected.size(), JOB_TIMEOUT);
    String savepoint =
        cluster
            .stopWithSavepoint(
                job,
                tmp.resolve("savepoints").toUri().toString(),
                false,
                SavepointFormatType.NATIVE)
            .get(1, TimeUnit.MINUTES);
    assertBackend(cluster, job, backend);
    ResultSet before = ResultCollectingSink.results(first);
    assertThat(before.size())
        .as("results before the savepoint")
        .isPositive()
        .isLessThan(expected.size());
    for (int parallelism : new int[] {3, 1}) {
      JobParams p = interruptedParams();
      p.parallelism = parallelism;
      String name = runName();
      JobID restored = submit(cluster, backend.apply(jobConfig()), p, name, savepoint);
      MiniClusterJobs.await(cluster, restored, JOB_TIMEOUT);
      assertBackend(cluster, restored, backend);
      ResultSet all = ResultCollectingSink.results(name);
      assertThat(all.size())
          .as("results after the restore at " + parallelism)
          .isLessThan(expected.size());
      all.addAll(before);
      assertThat(all.conflicts()).as("results emitted again with other values").isEmpty();
      assertThat(all.diff(expected)).as("savepoint at 2, restored at " + parallelism).isEmpty();
      ResultCollectingSink.drop(name);
    }
    ResultCollectingSink.drop(first);
  }

  /**
   * kill -9 of the daemon mid-job, then a new daemon on the same socket and data dir: the task
   * fails on the lost connection with requests in flight, Flink restarts it from the last completed
   * checkpoint, whose handles load the new daemon, and the output is exactly the model's. The test
   * runs a daemon of its own, as {@code
   * KeyedAggregationITCase.daemonKilledMidJobRecoversFromLastCheckpoint} does for the synchronous
   * backend.
   */
  @Test
  void daemonKilledMidJobRecoversFromLastCheckpoint(@InjectMiniCluster MiniCluster cluster)
      throws Exception {
    Path bin = StatedDaemon.binOrSkip();
    try (StatedDaemon daemon =
        StatedDaemon.start(bin, tmp.resolve("killed-daemon-" + UUID.randomUUID()))) {
      Configuration c = StatedDaemon.restartsOutlastingKill(daemon.backend().apply(jobConfig()));
      String name = runName();
      JobID job = submit(cluster, c, interruptedParams(), name, null);
      MiniClusterJobs.awaitMidStream(cluster, job, name, expected.size(), JOB_TIMEOUT);
      daemon.kill9();
      daemon.restart();
      MiniClusterJobs.await(cluster, job, JOB_TIMEOUT);
      assertRestoredFromCheckpoint(cluster, job);
      assertMatchesModel(ResultCollectingSink.results(name));
      ResultCollectingSink.drop(name);
    }
  }

  /**
   * The asynchronous backend on stated's incremental checkpoints (kind lsm, {@code
   * state.backend.stated.incremental}; a daemon of the test's own whose {@code --external-dir} is
   * Flink's checkpoint directory): an injected failure restores exactly, and a retained checkpoint
   * taken mid-stream at parallelism 2 restores a job at 3, whose output and the first run's
   * together are the model's. Both restores hand the daemon the checkpoint's incremental handles
   * (at 3, clipped by key group).
   */
  @Test
  void incrementalCheckpointsRestoreAfterFailureAndAtAnotherParallelism(
      @InjectMiniCluster MiniCluster cluster) throws Exception {
    try (StatedDaemon daemon = StatedIncrementalITCase.startDaemon(tmp)) {
      Configuration c = StatedIncrementalITCase.incremental(daemon, tmp);

      JobParams p = params();
      p.failAfterRecords = p.events / p.parallelism / 2;
      String name = runName();
      JobID job = submit(cluster, c, p, name, null);
      MiniClusterJobs.await(cluster, job, JOB_TIMEOUT);
      assertRestoredFromCheckpoint(cluster, job);
      assertThat(
              MiniClusterJobs.checkpointStats(cluster, job)
                  .getHistory()
                  .getLatestCompletedCheckpoint()
                  .getCheckpointedSize())
          .as("bytes the last checkpoint wrote")
          .isPositive();
      assertMatchesModel(ResultCollectingSink.results(name));
      ResultCollectingSink.drop(name);

      Configuration retained = new Configuration(c);
      retained.set(
          CheckpointingOptions.EXTERNALIZED_CHECKPOINT_RETENTION,
          org.apache.flink.configuration.ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION);
      String first = runName();
      JobID running = submit(cluster, retained, interruptedParams(), first, null);
      MiniClusterJobs.awaitMidStream(cluster, running, first, expected.size(), JOB_TIMEOUT);
      cluster.cancelJob(running).get(1, TimeUnit.MINUTES);
      cluster.requestJobResult(running).get(1, TimeUnit.MINUTES);
      String path =
          MiniClusterJobs.checkpointStats(cluster, running)
              .getHistory()
              .getLatestCompletedCheckpoint()
              .getExternalPath();
      ResultSet before = ResultCollectingSink.results(first);
      JobParams at3 = interruptedParams();
      at3.parallelism = 3;
      String second = runName();
      JobID rescaled = submit(cluster, c, at3, second, path);
      MiniClusterJobs.await(cluster, rescaled, JOB_TIMEOUT);
      ResultSet all = ResultCollectingSink.results(second);
      assertThat(all.size()).as("results after the restore at 3").isLessThan(expected.size());
      all.addAll(before);
      assertThat(all.conflicts()).as("results emitted again with other values").isEmpty();
      assertThat(all.diff(expected)).as("checkpoint at 2, restored at 3").isEmpty();
      ResultCollectingSink.drop(first);
      ResultCollectingSink.drop(second);
    }
  }

  private static String runName() {
    return "async-" + UUID.randomUUID();
  }

  private static Configuration jobConfig() {
    Configuration c = new Configuration();
    c.set(
        CheckpointingOptions.CHECKPOINTS_DIRECTORY, tmp.resolve("checkpoints").toUri().toString());
    return c;
  }

  /**
   * Submits the job (source -> keyBy -> {@link AsyncCounter} with {@code enableAsyncState()} -> the
   * sink named {@code name}), with fixed uids so that a savepoint restores at another parallelism;
   * from {@code restorePath} unless it is null.
   */
  private static JobID submit(
      MiniCluster cluster, Configuration conf, JobParams p, String name, String restorePath)
      throws Exception {
    StreamExecutionEnvironment env =
        new StreamExecutionEnvironment(KeyedAggregationJob.withDefaults(conf, p));
    env.setParallelism(p.parallelism);
    env.setMaxParallelism(p.maxParallelism);
    DataGeneratorSource<Event> source =
        new DataGeneratorSource<>(
            new EventGenerator(p),
            p.events,
            RateLimiterStrategy.perCheckpoint((int) p.recordsPerCheckpoint),
            TypeInformation.of(Event.class));
    env.fromSource(source, WatermarkStrategy.noWatermarks(), "events")
        .uid("events")
        .setParallelism(1)
        .keyBy(new KeyedAggregationJob.EventKey(), Types.LONG)
        .enableAsyncState()
        .process(new AsyncCounter(p))
        .uid("async-counter")
        .sinkTo(new ResultCollectingSink(name, false))
        .uid("collect");
    JobGraph graph = env.getStreamGraph().getJobGraph();
    if (restorePath != null) {
      graph.setSavepointRestoreSettings(
          SavepointRestoreSettings.forPath(restorePath, false, RecoveryClaimMode.NO_CLAIM));
    }
    cluster.submitJob(graph).get(1, TimeUnit.MINUTES);
    return graph.getJobID();
  }

  /** The run used the backend (read once it ended: before, the graph may say "Unknown"). */
  private static void assertBackend(MiniCluster cluster, JobID job, Backends.Backend backend)
      throws Exception {
    if (backend.expectedName() != null) {
      assertThat(MiniClusterJobs.graph(cluster, job).getStateBackendName())
          .as("state backend of job")
          .contains(backend.expectedName());
    }
  }

  private static void assertRestoredFromCheckpoint(MiniCluster cluster, JobID job)
      throws Exception {
    RestoredCheckpointStats restored =
        MiniClusterJobs.checkpointStats(cluster, job).getLatestRestoredCheckpoint();
    assertThat(restored).as("the job restored from a checkpoint").isNotNull();
    assertThat(restored.getCheckpointId()).isPositive();
  }

  private static void assertMatchesModel(ResultSet got) {
    assertThat(got.conflicts()).as("results emitted again with other values").isEmpty();
    assertThat(got.diff(expected)).as("output against the model").isEmpty();
  }

  /**
   * The asynchronous keyed operator; with {@code failAfterRecords} set, fails once, on subtask 0,
   * after a completed checkpoint.
   */
  static final class AsyncCounter extends KeyedProcessFunction<Long, Event, Result>
      implements CheckpointListener {
    private static final long serialVersionUID = 1L;

    private final JobParams params;
    private transient ValueState<Long> count;
    private transient ReducingState<Long> sum;
    private transient ListState<Long> run;
    private transient MapState<Long, Long> buckets;
    private transient boolean failureArmed;
    private transient long processed;
    private transient long checkpoints;

    AsyncCounter(JobParams params) {
      this.params = params;
    }

    @Override
    public void open(OpenContext openContext) {
      StreamingRuntimeContext ctx = (StreamingRuntimeContext) getRuntimeContext();
      count = ctx.getValueState(new ValueStateDescriptor<>("count", Types.LONG));
      sum = ctx.getReducingState(new ReducingStateDescriptor<>("sum", Long::sum, Types.LONG));
      run = ctx.getListState(new ListStateDescriptor<>("run", Types.LONG));
      buckets = ctx.getMapState(new MapStateDescriptor<>("buckets", Types.LONG, Types.LONG));
      failureArmed =
          params.failAfterRecords > 0
              && ctx.getTaskInfo().getIndexOfThisSubtask() == 0
              && ctx.getTaskInfo().getAttemptNumber() == 0;
    }

    @Override
    public void notifyCheckpointComplete(long checkpointId) {
      checkpoints++;
    }

    @Override
    public void processElement(Event e, Context ctx, Collector<Result> out) throws Exception {
      processed++;
      if (failureArmed && checkpoints > 0 && processed >= params.failAfterRecords) {
        failureArmed = false;
        throw new KeyedAggregator.InjectedFailure(
            "injected failure after " + processed + " records and " + checkpoints + " checkpoints");
      }
      long key = e.key;
      count
          .asyncValue()
          .thenCompose(
              c -> {
                long n = (c == null ? 0 : c) + 1;
                StateFuture<Void> runWrite = n % 10 == 0 ? run.asyncClear() : run.asyncAdd(e.value);
                return count
                    .asyncUpdate(n)
                    .thenCompose(x -> sum.asyncAdd(e.value))
                    .thenCompose(x -> runWrite)
                    .thenCompose(x -> buckets.asyncPut(n % 7, e.value))
                    .thenCompose(x -> read(key, n));
              })
          .thenAccept(out::collect);
    }

    private StateFuture<Result> read(long key, long n) {
      long[] acc = new long[2];
      return sum.asyncGet()
          .thenCompose(
              s ->
                  run.asyncGet()
                      // ForSt answers a missing list with null, stated with an
                      // empty iterator.
                      .thenCompose(
                          it ->
                              it == null
                                  ? StateFutureUtils.completedVoidFuture()
                                  : it.onNext(
                                      (Long v) -> {
                                        acc[0] += v;
                                      }))
                      .thenCompose(x -> buckets.asyncValues())
                      .thenCompose(
                          it ->
                              it.onNext(
                                  (Long v) -> {
                                    acc[1] += v;
                                  }))
                      .thenApply(
                          x -> new Result(Result.WINDOW, key, n, n, s, acc[0], acc[1], 0, 0, 0)));
    }
  }
}
