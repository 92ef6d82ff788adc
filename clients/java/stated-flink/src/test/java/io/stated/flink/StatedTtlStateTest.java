package io.stated.flink;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.state.CheckpointStorage;
import org.apache.flink.runtime.state.StateBackend;
import org.apache.flink.runtime.state.storage.JobManagerCheckpointStorage;
import org.apache.flink.runtime.state.ttl.StateBackendTestContext;
import org.apache.flink.runtime.state.ttl.TtlStateTestBase;
import org.apache.flink.runtime.state.ttl.TtlTimeProvider;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Flink's own {@link TtlStateTestBase} (from flink-runtime's tests jar) on the stated backend: TTL
 * through Flink's own state wrappers, with snapshots and restores, against a real daemon. None of
 * its tests is switched off. (Flink's incremental TTL cleanup, a heap-backend feature, is not
 * offered: {@code incrementalCleanupSupported()} stays false, as for RocksDB.)
 */
@Tag("daemon-views")
public class StatedTtlStateTest extends TtlStateTestBase {
  @RegisterExtension static final TestDaemon DAEMON = TestDaemon.plain();

  @Override
  protected StateBackendTestContext createStateBackendTestContext(TtlTimeProvider timeProvider) {
    return new StateBackendTestContext(timeProvider) {
      @Override
      protected StateBackend createStateBackend() {
        Configuration c = new Configuration();
        c.set(StatedOptions.SOCKET, DAEMON.socket());
        return new StatedStateBackend().configure(c, getClass().getClassLoader());
      }

      @Override
      protected CheckpointStorage createCheckpointStorage() {
        return new JobManagerCheckpointStorage();
      }
    };
  }
}
