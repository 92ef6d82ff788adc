package io.stated.flink;

import java.util.List;
import java.util.Map;
import org.apache.flink.runtime.state.ConfigurableStateBackend;
import org.apache.flink.runtime.state.v2.StateBackendTestV2Base;
import org.apache.flink.testutils.junit.extensions.parameterized.Parameter;
import org.apache.flink.testutils.junit.extensions.parameterized.ParameterizedTestExtension;
import org.apache.flink.testutils.junit.extensions.parameterized.Parameters;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Flink's own {@link StateBackendTestV2Base} (from flink-runtime's tests jar) on the stated
 * backend's asynchronous keyed backend, against a real daemon started from the repository, for the
 * daemon's file and lsm working state, and for lsm with stated's incremental checkpoints ({@link
 * StatedOptions#INCREMENTAL}: the daemon runs with {@code --external-dir}). The tests switched off
 * are in {@link #SWITCHED_OFF}, each with its reason; {@link StatedAsyncStateTest} covers what they
 * would.
 *
 * <p>Tagged daemon-views like the synchronous suite: snapshots and restores need the daemon's views
 * and bulk load.
 */
@Tag("daemon-views")
@ExtendWith({ParameterizedTestExtension.class, SwitchedOff.class})
public class StatedAsyncStateBackendTest extends StateBackendTestV2Base<StatedStateBackend> {
  @RegisterExtension static final TestDaemon DAEMON = TestDaemon.withExternalDir();

  private static final String WRONG_KEY_GROUPS =
      "Flink 2.3.0's test opens each backend with the size of its key-group range as the"
          + " number of key groups (e.g. range [5,9] of 5 key groups, where the job's max"
          + " parallelism is 10), which Flink's own backends never check; the stated daemon"
          + " refuses a range outside [0, number of key groups). Rescaling through the"
          + " asynchronous backend, with a consistent max parallelism, is tested in"
          + " StatedAsyncStateTest.rescale.";

  /** Tests of the suite switched off here, with the reason (see {@link SwitchedOff}). */
  public static final Map<String, String> SWITCHED_OFF =
      Map.of(
          "testAsyncStateBackendScaleUp", WRONG_KEY_GROUPS,
          "testAsyncStateBackendScaleDown", WRONG_KEY_GROUPS);

  /** The daemon's backend kind the instances use. */
  @Parameter public String kind;

  /** The asynchronous value cache: off (the default) and on. */
  @Parameter(1)
  public String asyncCache;

  /** Checkpoints as stated's incremental ones (lsm only) or full snapshots. */
  @Parameter(2)
  public boolean incremental;

  @Parameters(name = "kind={0}, async cache={1}, incremental={2}")
  public static List<Object[]> kinds() {
    return List.of(
        new Object[] {"file", "0", false},
        new Object[] {"lsm", "0", false},
        new Object[] {"file", "64m", false},
        new Object[] {"lsm", "64m", false},
        new Object[] {"lsm", "0", true});
  }

  @Override
  protected ConfigurableStateBackend getStateBackend() {
    org.apache.flink.configuration.Configuration c =
        new org.apache.flink.configuration.Configuration();
    c.set(StatedOptions.SOCKET, DAEMON.socket());
    c.set(StatedOptions.BACKEND_KIND, kind);
    c.set(
        StatedOptions.ASYNC_CACHE_SIZE,
        org.apache.flink.configuration.MemorySize.parse(asyncCache));
    c.set(StatedOptions.INCREMENTAL, incremental);
    return new StatedStateBackend().configure(c, getClass().getClassLoader());
  }

  @Override
  protected org.apache.flink.runtime.state.CheckpointStorage getCheckpointStorage() {
    // Snapshots go to Flink's checkpoint streams; the test keeps them in memory.
    return new org.apache.flink.runtime.state.storage.JobManagerCheckpointStorage();
  }

  @Override
  protected void restoreJob() {
    // Called between a snapshot and its restore. Nothing to prepare: the
    // snapshot is a self-contained Flink handle (the canonical full
    // format), and the restoring backend opens a new daemon instance from
    // it; the disposed backend closed its own instance.
  }
}
