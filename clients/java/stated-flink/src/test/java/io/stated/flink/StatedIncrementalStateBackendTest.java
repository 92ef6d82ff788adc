package io.stated.flink;

import java.util.List;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.state.ConfigurableStateBackend;
import org.apache.flink.runtime.state.StateBackendTestBase;
import org.apache.flink.testutils.junit.extensions.parameterized.Parameter;
import org.apache.flink.testutils.junit.extensions.parameterized.ParameterizedTestExtension;
import org.apache.flink.testutils.junit.extensions.parameterized.Parameters;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Flink's own {@link StateBackendTestBase} with stated's incremental checkpoints ({@link
 * StatedOptions#INCREMENTAL}: an lsm instance in the daemon's externally owned mode, checkpoints as
 * {@code IncrementalRemoteKeyedStateHandle}s), against a daemon started with {@code
 * --external-dir}.
 */
@Tag("daemon-views")
@ExtendWith(ParameterizedTestExtension.class)
public class StatedIncrementalStateBackendTest extends StateBackendTestBase<StatedStateBackend> {
  @RegisterExtension static final TestDaemon DAEMON = TestDaemon.withExternalDir();

  /** The suite's methods are test templates: they run once per parameter, here one. */
  @Parameter public String mode;

  @Parameters(name = "{0}")
  public static List<String> modes() {
    return List.of("lsm-incremental");
  }

  @Override
  protected ConfigurableStateBackend getStateBackend() {
    Configuration c = new Configuration();
    c.set(StatedOptions.SOCKET, DAEMON.socket());
    c.set(StatedOptions.BACKEND_KIND, "lsm");
    c.set(StatedOptions.INCREMENTAL, true);
    return new StatedStateBackend().configure(c, getClass().getClassLoader());
  }

  @Override
  protected org.apache.flink.runtime.state.CheckpointStorage getCheckpointStorage() {
    // The meta streams go to Flink's checkpoint streams; the test keeps them in memory.
    return new org.apache.flink.runtime.state.storage.JobManagerCheckpointStorage();
  }

  @Override
  protected boolean isSerializerPresenceRequiredOnRestore() {
    return false;
  }

  @Override
  protected boolean supportsAsynchronousSnapshots() {
    return true;
  }

  /**
   * The state goes to the daemon's files, not through Flink's stream factory, which carries only
   * the small meta stream: so Flink's suite skips the three tests that block a snapshot in the
   * middle of its stream writes ({@code testAsyncSnapshot}, {@code testAsyncSnapshotCancellation},
   * {@code testParallelAsyncSnapshots}; their stream never reaches the blocking write), as it does
   * for RocksDB's incremental checkpoints. Concurrent writes during an incremental snapshot are
   * covered by IncrementalCheckpointTest (writes after checkpoint 3 are in no restore of it).
   */
  @Override
  protected boolean snapshotUsesStreamFactory() {
    return false;
  }
}
