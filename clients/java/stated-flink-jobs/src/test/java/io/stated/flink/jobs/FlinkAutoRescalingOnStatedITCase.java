package io.stated.flink.jobs;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;

import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;
import java.util.stream.Stream;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.test.util.MiniClusterWithClientResource;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.io.TempDir;

/**
 * Flink's own {@code AutoRescalingITCase} (flink-tests 2.3.0) on stated: every one of its tests
 * (keyed state and operator state rescaled in and out from a checkpoint by the adaptive scheduler,
 * in a MiniCluster of 2 TaskManagers x 2 slots) runs unchanged on stated's full snapshots (kind
 * file, and kind lsm) and on stated's incremental checkpoints (kind lsm, a daemon of the test's own
 * whose {@code --external-dir} is the checkpoint directory Flink's setup chose).
 *
 * <p>How: Flink's class is package-private, with a private constructor and parameters ({@code
 * backend}, {@code useIngestDB}) fixed by its own {@code @Parameters} method, and its {@code
 * setup()} builds the cluster's configuration itself with {@code state.backend.type} = the backend
 * parameter. So each test here makes an instance through that constructor with the backend {@link
 * PropertyStatedBackendFactory} (which takes stated's options from system properties), calls
 * Flink's {@code setup()} and then Flink's test method, as Flink's ParameterizedTestExtension
 * would; JUnit's own mechanisms have no way to give another class's {@code @Parameters} other
 * values. Each test has its own cluster, as in Flink's run (setup() of a new instance always starts
 * one), which is shut down after it.
 *
 * <p>Switched off: the tests in {@link #SWITCHED_OFF}, each with why.
 */
class FlinkAutoRescalingOnStatedITCase {
  private static final FlinkTestClass FLINK =
      FlinkTestClass.load("org.apache.flink.test.checkpointing.AutoRescalingITCase");

  private static final Duration TEST_TIMEOUT = Duration.ofMinutes(3);

  /** Flink's tests whose jobs hold keyed state: their incremental runs must show daemon SSTs. */
  private static final Set<String> KEYED =
      Set.of(
          "testCheckpointRescalingInKeyedState",
          "testCheckpointRescalingOutKeyedState",
          "testCheckpointRescalingWithKeyedAndNonPartitionedState");

  /** "mode:test" of Flink's tests not run, each with why. */
  static final Map<String, String> SWITCHED_OFF = new TreeMap<>(Map.of());

  @TempDir static Path tmp;

  @Test
  void switchedOffNamesFlinkTests() {
    // A switched-off entry must name a test Flink has, so the list cannot go stale.
    for (String key : SWITCHED_OFF.keySet()) {
      assertThat(FLINK.testMethods()).contains(key.substring(key.indexOf(':') + 1));
    }
    assertThat(FLINK.testMethods()).containsAll(KEYED);
  }

  @TestFactory
  Stream<DynamicTest> onStatedFileFull() {
    return tests("file-full", name -> run(name, sharedDaemon("file"), null));
  }

  @TestFactory
  Stream<DynamicTest> onStatedLsmFull() {
    return tests("lsm-full", name -> run(name, sharedDaemon("lsm"), null));
  }

  @TestFactory
  Stream<DynamicTest> onStatedIncremental() {
    Path bin = StatedDaemon.binOrSkip();
    return tests("incremental", name -> run(name, null, bin));
  }

  /** stated's options on the daemon scripts/flink-jobs.sh started; skips when none is given. */
  private static Map<String, String> sharedDaemon(String kind) {
    Backends.Backend stated = Backends.stated();
    Assumptions.assumeTrue(stated != null, Backends.statedStatus());
    return Map.of(
        "socket", stated.options().get(Backends.STATED_OPTION_PREFIX + "socket"), "kind", kind);
  }

  private interface Run {
    void test(String flinkMethod) throws Exception;
  }

  private static Stream<DynamicTest> tests(String mode, Run run) {
    return FLINK.testMethods().stream()
        .map(
            name ->
                DynamicTest.dynamicTest(
                    name,
                    () -> {
                      String off = SWITCHED_OFF.get(mode + ":" + name);
                      Assumptions.assumeTrue(off == null, () -> "switched off: " + off);
                      run.test(name);
                    }));
  }

  /**
   * Flink's setup() and test {@code method} with the backend {@link PropertyStatedBackendFactory}
   * on {@code options}; with {@code bin} instead, on a daemon of its own whose external dir is the
   * checkpoint directory of the cluster Flink's setup() started, in incremental mode.
   */
  private static void run(String method, Map<String, String> options, Path bin) throws Exception {
    // Flink's static @TempDir, under which its setup() makes the checkpoint directories.
    FLINK.setStatic(
        "temporaryFolder", Files.createDirectories(tmp.resolve(method + "-" + UUID.randomUUID())));
    Object test = FLINK.construct(PropertyStatedBackendFactory.class.getName(), false);
    StatedDaemon daemon = null;
    SharedFileWatcher watcher = null;
    try {
      FLINK.call(test, "setup");
      if (bin != null) {
        Path checkpoints = checkpointDirectory();
        daemon =
            StatedDaemon.start(
                bin,
                tmp.resolve("daemon-" + UUID.randomUUID()),
                "--external-dir",
                checkpoints.toString());
        watcher = new SharedFileWatcher(checkpoints);
        options =
            Map.of("socket", daemon.socket().toString(), "kind", "lsm", "incremental", "true");
      }
      Map<String, String> o = options;
      assertTimeoutPreemptively(
          TEST_TIMEOUT, () -> PropertyStatedBackendFactory.with(o, () -> FLINK.call(test, method)));
      if (watcher != null && KEYED.contains(method)) {
        assertThat(watcher.seen())
            .as("%s: the daemon's SSTs in Flink's shared directory of the job while it ran", method)
            .isNotEmpty();
      }
    } finally {
      FLINK.call(null, "shutDownExistingCluster");
      if (watcher != null) {
        watcher.close();
      }
      if (daemon != null) {
        daemon.close();
      }
    }
  }

  /** The checkpoint directory Flink's setup() configured its cluster with. */
  private static Path checkpointDirectory() throws Exception {
    MiniClusterWithClientResource cluster =
        (MiniClusterWithClientResource) FLINK.getStatic("cluster");
    String dir =
        cluster.getMiniCluster().getConfiguration().get(CheckpointingOptions.CHECKPOINTS_DIRECTORY);
    return Path.of(URI.create(dir)).toRealPath();
  }
}
