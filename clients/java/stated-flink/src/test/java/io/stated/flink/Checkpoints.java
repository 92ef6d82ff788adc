package io.stated.flink;

import java.util.concurrent.RunnableFuture;
import org.apache.flink.runtime.checkpoint.CheckpointOptions;
import org.apache.flink.runtime.state.CheckpointableKeyedStateBackend;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.SnapshotResult;
import org.apache.flink.runtime.state.memory.MemCheckpointStreamFactory;

/** Checkpoints of a keyed backend as Flink's task takes them, for tests. */
final class Checkpoints {
  private Checkpoints() {}

  /** Runs checkpoint {@code id} of {@code b} to the end; its handle (streams kept in memory). */
  static KeyedStateHandle take(CheckpointableKeyedStateBackend<?> b, long id) throws Exception {
    RunnableFuture<SnapshotResult<KeyedStateHandle>> f =
        b.snapshot(
            id,
            0,
            new MemCheckpointStreamFactory(64 << 20),
            CheckpointOptions.forCheckpointWithDefaultLocation());
    f.run();
    return f.get().getJobManagerOwnedSnapshot();
  }
}
