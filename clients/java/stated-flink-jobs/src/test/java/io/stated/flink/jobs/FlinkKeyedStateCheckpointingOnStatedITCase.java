package io.stated.flink.jobs;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.test.junit5.MiniClusterExtension;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.extension.RegisterExtension;
import org.junit.jupiter.api.io.TempDir;

/**
 * Flink's own {@code KeyedStateCheckpointingITCase} (flink-tests 2.3.0) on stated: its program (two
 * throttled sources, a keyed sum in value state that fails once after a checkpoint, a keyed
 * counting sink with two value states, one of a non-serializable type; after the run every sum and
 * count must be exact) runs unchanged, in Flink's own MiniCluster of the class (2 TaskManagers x 2
 * slots, 12 MB managed memory), on stated's full snapshots of kind file and lsm and on stated's
 * incremental checkpoints.
 *
 * <p>Not run: Flink's five test methods themselves ({@link #FLINK_TESTS_NOT_RUN}), because each
 * only picks one of Flink's backends (HashMap with JobManager or file storage, RocksDB full and
 * incremental, ForSt) and then runs the same private {@code testProgramWithBackend}; the class runs
 * that program three times on stated instead.
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class FlinkKeyedStateCheckpointingOnStatedITCase {
  private static final FlinkTestClass FLINK =
      FlinkTestClass.load("org.apache.flink.test.checkpointing.KeyedStateCheckpointingITCase");

  /** Flink's test methods not run here, each with why. */
  static final Map<String, String> FLINK_TESTS_NOT_RUN =
      new TreeMap<>(
          Map.of(
              "testWithMemoryBackendAsync", "picks HashMap with JobManager checkpoint storage",
              "testWithFsBackendAsync", "picks HashMap with file checkpoint storage",
              "testWithRocksDbBackendFull", "picks RocksDB, full checkpoints",
              "testWithRocksDbBackendIncremental", "picks RocksDB, incremental checkpoints",
              "testWithForStBackendIncremental", "picks ForSt"));

  /** Flink's own cluster of the class, with its own configuration. */
  @RegisterExtension static final MiniClusterExtension CLUSTER = flinkCluster();

  @TempDir Path tmp;

  private static MiniClusterExtension flinkCluster() {
    try {
      return (MiniClusterExtension) FLINK.getStatic("MINI_CLUSTER_EXTENSION");
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException(FLINK.name() + " has no MINI_CLUSTER_EXTENSION", e);
    }
  }

  @BeforeEach
  void clearFlinkResults() throws ReflectiveOperationException {
    // The program's results are static maps of Flink's class that no run clears: clear them,
    // so that a run cannot pass on an earlier run's sums and counts.
    ((Map<?, ?>) FLINK.getNestedStatic("OnceFailingPartitionedSum", "ALL_SUMS")).clear();
    ((Map<?, ?>) FLINK.getNestedStatic("CounterSink", "ALL_COUNTS")).clear();
  }

  @Test
  void everyFlinkTestIsRunOrListed() {
    // Flink's methods are all backend pickers; a new one in a later Flink must be looked at.
    assertThat(FLINK.testMethods()).containsExactlyElementsOf(FLINK_TESTS_NOT_RUN.keySet());
  }

  @Test
  void programOnStatedFileFull() throws Exception {
    runProgram(sharedDaemon("file"), tmp.resolve("checkpoints"));
  }

  @Test
  void programOnStatedLsmFull() throws Exception {
    runProgram(sharedDaemon("lsm"), tmp.resolve("checkpoints"));
  }

  @Test
  void programOnStatedIncremental() throws Exception {
    Path bin = StatedDaemon.binOrSkip();
    Path checkpoints = Files.createDirectories(tmp.resolve("checkpoints")).toRealPath();
    try (StatedDaemon daemon =
            StatedDaemon.start(
                bin,
                tmp.resolve("daemon-" + UUID.randomUUID()),
                "--external-dir",
                "" + checkpoints);
        SharedFileWatcher watcher = new SharedFileWatcher(checkpoints)) {
      runProgram(
          Map.of("socket", daemon.socket().toString(), "kind", "lsm", "incremental", "true"),
          checkpoints);
      assertThat(watcher.seen())
          .as("the daemon's SSTs in Flink's shared directory of the job while it ran")
          .isNotEmpty();
    }
  }

  /** stated's options on the daemon scripts/flink-jobs.sh started; skips when none is given. */
  private static Map<String, String> sharedDaemon(String kind) {
    Backends.Backend stated = Backends.stated();
    Assumptions.assumeTrue(stated != null, Backends.statedStatus());
    return Map.of(
        "socket", stated.options().get(Backends.STATED_OPTION_PREFIX + "socket"), "kind", kind);
  }

  /** Flink's private testProgramWithBackend on an environment whose backend is stated. */
  private void runProgram(Map<String, String> options, Path checkpoints) throws Exception {
    Files.createDirectories(checkpoints);
    Configuration c = new Configuration();
    c.set(StateBackendOptions.STATE_BACKEND, PropertyStatedBackendFactory.class.getName());
    c.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
    c.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, checkpoints.toUri().toString());
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment();
    env.configure(c);
    Object test = FLINK.construct();
    PropertyStatedBackendFactory.with(
        options, () -> FLINK.call(test, "testProgramWithBackend", env));
  }
}
