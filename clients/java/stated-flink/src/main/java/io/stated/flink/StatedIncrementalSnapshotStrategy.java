package io.stated.flink;

import io.stated.api.v1.SnapshotResponse;
import io.stated.client.OwnedSnapshot;
import io.stated.client.StatedException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import javax.annotation.Nonnull;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.core.memory.DataOutputViewStreamWrapper;
import org.apache.flink.runtime.checkpoint.CheckpointOptions;
import org.apache.flink.runtime.state.CheckpointStateOutputStream;
import org.apache.flink.runtime.state.CheckpointStreamFactory;
import org.apache.flink.runtime.state.CheckpointedStateScope;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.SnapshotResources;
import org.apache.flink.runtime.state.SnapshotResult;
import org.apache.flink.runtime.state.SnapshotStrategy;
import org.apache.flink.runtime.state.StreamStateHandle;
import org.apache.flink.runtime.state.metainfo.StateMetaInfoSnapshot;
import org.apache.flink.util.IOUtils;

/**
 * A checkpoint as stated's incremental lsm checkpoint of an externally owned instance. The
 * synchronous part sends what the task queued and a snapshot barrier (the daemon freezes the store
 * at it, uploading in the background), and takes the states' serializer snapshots; the asynchronous
 * part waits for the upload (AwaitSnapshot), writes the meta stream ({@link IncrementalMeta})
 * through Flink's stream factory and returns the daemon's files as an {@code
 * IncrementalRemoteKeyedStateHandle} ({@link ExternalSnapshots#handle}).
 *
 * <p>One strategy per checkpoint: whether it reuses files ({@code fullCheckpoint}: any sharing
 * strategy but {@code FORWARD_BACKWARD}, e.g. Flink's {@code FULL_CHECKPOINT}, the first checkpoint
 * after a NO_CLAIM restore) is known from the checkpoint's options only, and the barrier goes out
 * in the synchronous part, which does not get them.
 */
final class StatedIncrementalSnapshotStrategy<K>
    implements SnapshotStrategy<KeyedStateHandle, StatedIncrementalSnapshotStrategy.Resources> {
  private final StatedKeyedStateBackend<K> backend;
  private final ExternalSnapshots external;
  private final boolean fullCheckpoint;

  StatedIncrementalSnapshotStrategy(
      StatedKeyedStateBackend<K> backend, ExternalSnapshots external, boolean fullCheckpoint) {
    this.backend = backend;
    this.external = external;
    this.fullCheckpoint = fullCheckpoint;
  }

  /**
   * The barrier sent (null: no state registered, nothing to snapshot), the daemon's id of the
   * snapshot and the serializer snapshots taken at it.
   */
  static final class Resources implements SnapshotResources {
    final CompletableFuture<SnapshotResponse> barrier;
    final long daemonId;
    final List<StateMetaInfoSnapshot> states;

    Resources(
        CompletableFuture<SnapshotResponse> barrier,
        long daemonId,
        List<StateMetaInfoSnapshot> states) {
      this.barrier = barrier;
      this.daemonId = daemonId;
      this.states = states;
    }

    @Override
    public void release() {}
  }

  @Override
  public Resources syncPrepareResources(long checkpointId) {
    backend.daemon().check();
    List<StateMetaInfoSnapshot> states = new ArrayList<>();
    for (StatedKeyedStateBackend.Registered<K> r : backend.states.values()) {
      states.add(r.meta.snapshot());
    }
    if (backend.daemonQueues() != null) {
      // The timers are in the daemon's files with the other states.
      states.addAll(backend.daemonQueues().snapshots());
    }
    if (states.isEmpty()) {
      // A task that registered no state has nothing to restore (as for
      // Flink's own backends, its snapshot is empty).
      return new Resources(null, 0, states);
    }
    long id = external.newDaemonId(checkpointId);
    return new Resources(external.instance().snapshotExternal(id, fullCheckpoint), id, states);
  }

  @Override
  public SnapshotResultSupplier<KeyedStateHandle> asyncSnapshot(
      Resources resources,
      long checkpointId,
      long timestamp,
      @Nonnull CheckpointStreamFactory streamFactory,
      @Nonnull CheckpointOptions checkpointOptions) {
    if (resources.barrier == null) {
      return registry -> SnapshotResult.empty();
    }
    TypeSerializer<K> keySerializer = backend.getKeySerializer().duplicate();
    return registry -> {
      boolean done = false;
      OwnedSnapshot s = null;
      try {
        StatedException.await(resources.barrier);
        s = StatedException.await(external.instance().awaitSnapshot(resources.daemonId));
        CheckpointStateOutputStream out =
            streamFactory.createCheckpointStateOutputStream(CheckpointedStateScope.EXCLUSIVE);
        registry.registerCloseable(out);
        try {
          IncrementalMeta.write(
              new DataOutputViewStreamWrapper(out),
              keySerializer,
              resources.states,
              s.taskHandle());
        } catch (Exception e) {
          if (registry.unregisterCloseable(out)) {
            IOUtils.closeQuietly(out);
          }
          throw e;
        }
        if (!registry.unregisterCloseable(out)) {
          // Flink cancelled the snapshot and closed the stream.
          throw new IOException("the snapshot of checkpoint " + checkpointId + " was cancelled");
        }
        StreamStateHandle meta = out.closeAndGetHandle();
        SnapshotResult<KeyedStateHandle> result =
            SnapshotResult.of(external.handle(checkpointId, s, backend.getKeyGroupRange(), meta));
        done = true;
        return result;
      } finally {
        if (!done) {
          // Flink never gets these files: delete what the daemon wrote.
          external.abandon(resources.daemonId, s);
        }
      }
    };
  }
}
