package io.stated.flink;

import io.stated.api.v1.ViewInfo;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import javax.annotation.Nonnull;
import org.apache.flink.runtime.checkpoint.CheckpointOptions;
import org.apache.flink.runtime.state.CheckpointStreamFactory;
import org.apache.flink.runtime.state.CheckpointStreamWithResultProvider;
import org.apache.flink.runtime.state.CheckpointedStateScope;
import org.apache.flink.runtime.state.FullSnapshotAsyncWriter;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.RegisteredKeyValueStateBackendMetaInfo;
import org.apache.flink.runtime.state.SnapshotResult;
import org.apache.flink.runtime.state.SnapshotStrategy;
import org.apache.flink.runtime.state.metainfo.StateMetaInfoSnapshot;

/**
 * Full snapshots in Flink's canonical key-grouped format. The synchronous part sends what the task
 * queued and takes a read view as a barrier on the batch stream (the daemon freezes it without
 * writing any file); the asynchronous part is Flink's own {@link FullSnapshotAsyncWriter}, fed by a
 * scan of that view in key-group order, while the task goes on writing.
 */
final class StatedSnapshotStrategy<K>
    implements SnapshotStrategy<KeyedStateHandle, StatedSnapshotResources<K>> {
  private final StatedKeyedStateBackend<K> backend;

  StatedSnapshotStrategy(StatedKeyedStateBackend<K> backend) {
    this.backend = backend;
  }

  @Override
  public StatedSnapshotResources<K> syncPrepareResources(long checkpointId) {
    backend.daemon().check();
    Map<String, RegisteredKeyValueStateBackendMetaInfo<?, ?>> metas = new HashMap<>();
    Map<
            String,
            org.apache.flink.runtime.state.StateSnapshotTransformer.StateSnapshotTransformFactory<
                ?>>
        transforms = new HashMap<>();
    for (Map.Entry<String, StatedKeyedStateBackend.Registered<K>> e : backend.states.entrySet()) {
      metas.put(e.getKey(), e.getValue().meta);
      transforms.put(e.getKey(), e.getValue().transform);
    }
    StatedQueues queues = backend.daemonQueues();
    if (metas.isEmpty() && (queues == null || queues.isEmpty())) {
      return new StatedSnapshotResources<>(backend, null, List.of(), List.of(), List.of());
    }
    ViewInfo view = backend.takeView();
    // kvStateId i is the view's state i: the scan visits states in that
    // order within a key group, as the writer wants them grouped.
    List<StateMetaInfoSnapshot> snaps = new ArrayList<>();
    List<RegisteredKeyValueStateBackendMetaInfo<?, ?>> byId = new ArrayList<>();
    List<EntryTransformer> transformers = new ArrayList<>();
    for (io.stated.api.v1.StateDescriptor d : view.getStatesList()) {
      RegisteredKeyValueStateBackendMetaInfo<?, ?> m = metas.get(d.getName());
      if (m == null && queues != null && queues.contains(d.getName())) {
        // A timer queue: written as Flink's PRIORITY_QUEUE state.
        snaps.add(queues.snapshot(d.getName()));
        byId.add(null);
        transformers.add(null);
        continue;
      }
      if (m == null) {
        backend.instance().releaseView(view.getViewId());
        throw new IllegalStateException(
            "the daemon's instance holds state "
                + d.getName()
                + " that this task never registered; was the instance opened by another task?");
      }
      snaps.add(m.snapshot());
      byId.add(m);
      transformers.add(EntryTransformer.of(m, transforms.get(d.getName())));
    }
    return new StatedSnapshotResources<>(backend, view, snaps, byId, transformers);
  }

  @Override
  public SnapshotResultSupplier<KeyedStateHandle> asyncSnapshot(
      StatedSnapshotResources<K> resources,
      long checkpointId,
      long timestamp,
      @Nonnull CheckpointStreamFactory streamFactory,
      @Nonnull CheckpointOptions checkpointOptions) {
    if (resources.getMetaInfoSnapshots().isEmpty()) {
      return registry -> SnapshotResult.empty();
    }
    return new FullSnapshotAsyncWriter<>(
        checkpointOptions.getCheckpointType(),
        () ->
            new CheckpointStreamWithResultProvider.PrimaryStreamOnly(
                streamFactory.createCheckpointStateOutputStream(CheckpointedStateScope.EXCLUSIVE)),
        resources);
  }
}
