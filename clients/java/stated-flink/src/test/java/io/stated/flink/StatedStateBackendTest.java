package io.stated.flink;

import java.util.List;
import org.apache.flink.runtime.state.ConfigurableStateBackend;
import org.apache.flink.runtime.state.StateBackendTestBase;
import org.apache.flink.testutils.junit.extensions.parameterized.Parameter;
import org.apache.flink.testutils.junit.extensions.parameterized.ParameterizedTestExtension;
import org.apache.flink.testutils.junit.extensions.parameterized.Parameters;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Flink's own {@link StateBackendTestBase} (from flink-runtime's tests jar) on the stated backend,
 * against a real daemon started from the repository.
 *
 * <p>All 71 tests of the suite run for each backend kind; none is switched off. (A switched-off
 * test would be overridden here with {@code @Disabled} and its reason.)
 *
 * <p>Run on the daemon's file (memory) and lsm (Pebble) working state, with the default cache, and
 * on file with a 4 KiB cache, which evicts all the time (so reads miss, misses go to the daemon and
 * states stop being complete in the cache); timers are daemon states in these (the default) and
 * heap queues on lsm with heap-timers. Tagged daemon-views: it needs the daemon's state
 * registration, views, key scans and bulk load.
 */
@Tag("daemon-views")
@ExtendWith(ParameterizedTestExtension.class)
public class StatedStateBackendTest extends StateBackendTestBase<StatedStateBackend> {
  @RegisterExtension static final TestDaemon DAEMON = TestDaemon.plain();

  /** The daemon's backend kind the instances use, and a cache size after a colon if not 64m. */
  @Parameter public String kind;

  @Parameters(name = "kind={0}")
  public static List<String> kinds() {
    // heap-timers: timers as Flink's heap queues instead of daemon states.
    return List.of("file", "lsm", "file:4kb", "lsm:heap-timers");
  }

  @Override
  protected ConfigurableStateBackend getStateBackend() {
    org.apache.flink.configuration.Configuration c =
        new org.apache.flink.configuration.Configuration();
    c.set(StatedOptions.SOCKET, DAEMON.socket());
    String[] kc = kind.split(":");
    c.set(StatedOptions.BACKEND_KIND, kc[0]);
    for (int i = 1; i < kc.length; i++) {
      if (kc[i].equals("heap-timers")) {
        c.set(StatedOptions.TIMER_SERVICE, "heap");
      } else {
        c.set(StatedOptions.CACHE_SIZE, org.apache.flink.configuration.MemorySize.parse(kc[i]));
      }
    }
    return new StatedStateBackend().configure(c, getClass().getClassLoader());
  }

  @Override
  protected org.apache.flink.runtime.state.CheckpointStorage getCheckpointStorage() {
    // Snapshots go to Flink's checkpoint streams; the test keeps them in memory.
    return new org.apache.flink.runtime.state.storage.JobManagerCheckpointStorage();
  }

  @Override
  protected boolean isSerializerPresenceRequiredOnRestore() {
    // Like RocksDB: values stay serialized in the daemon, so a restore
    // needs no old serializer to read them.
    return false;
  }

  @Override
  protected boolean supportsAsynchronousSnapshots() {
    return true;
  }
}
