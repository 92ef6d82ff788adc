package io.stated.flink;

import java.io.IOException;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.RunnableFuture;
import javax.annotation.Nonnull;
import org.apache.flink.api.common.state.v2.AggregatingStateDescriptor;
import org.apache.flink.api.common.state.v2.MapStateDescriptor;
import org.apache.flink.api.common.state.v2.ReducingStateDescriptor;
import org.apache.flink.api.common.state.v2.State;
import org.apache.flink.api.common.state.v2.StateDescriptor;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.runtime.asyncprocessing.StateExecutor;
import org.apache.flink.runtime.asyncprocessing.StateRequestHandler;
import org.apache.flink.runtime.checkpoint.CheckpointOptions;
import org.apache.flink.runtime.checkpoint.SnapshotType;
import org.apache.flink.runtime.state.AsyncKeyedStateBackend;
import org.apache.flink.runtime.state.CheckpointStreamFactory;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyGroupedInternalPriorityQueue;
import org.apache.flink.runtime.state.Keyed;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.PriorityComparable;
import org.apache.flink.runtime.state.SnapshotResult;
import org.apache.flink.runtime.state.StateSnapshotTransformer.StateSnapshotTransformFactory;
import org.apache.flink.runtime.state.heap.HeapPriorityQueueElement;
import org.apache.flink.runtime.state.v2.StateDescriptorUtils;
import org.apache.flink.runtime.state.v2.internal.InternalKeyedState;
import org.apache.flink.runtime.state.v2.ttl.TtlStateFactory;
import org.apache.flink.util.FlinkRuntimeException;
import org.apache.flink.util.Preconditions;

/**
 * The asynchronous (State V2) keyed backend of one task on a stated daemon instance.
 *
 * <p>It wraps a {@link StatedKeyedStateBackend} on the same instance and batch stream, which does
 * everything but the state accesses: restore (full snapshots, stated's incremental checkpoints and
 * canonical savepoints, rescaling included), the registration of states (meta info, serializer
 * compatibility, the daemon's state descriptors), snapshots (a view barrier on the stream, then
 * Flink's canonical full-snapshot writer, {@link StatedSnapshotStrategy}; or a snapshot barrier for
 * stated's incremental checkpoints, {@link StatedIncrementalSnapshotStrategy}) and timers (heap
 * priority queues, written at checkpoints). The state accesses are Flink's request-issuing V2
 * states ({@link StatedAsyncStates}), executed in batches by {@link StatedAsyncStateExecutor}. As
 * both write the same daemon states in the same encoding, a checkpoint of one is restored by the
 * other.
 *
 * <p>A snapshot holds every request executed before it: the executor sends each batch on the task
 * thread before returning, and the snapshot's barrier goes on the same stream after them; Flink
 * drains the records in flight before it takes the snapshot.
 */
public class StatedAsyncKeyedStateBackend<K> implements AsyncKeyedStateBackend<K> {
  private final StatedKeyedStateBackend<K> inner;
  private final Map<String, InternalKeyedState<?, ?, ?>> created = new HashMap<>();
  private StateRequestHandler handler;
  private StatedAsyncStateExecutor executor;

  private final org.apache.flink.api.common.ExecutionConfig executionConfig;

  /** The value cache's bytes ({@link StatedOptions#ASYNC_CACHE_SIZE}). */
  private final long cacheBytes;

  /** The addresses written to states registered fresh here (shared with the executor). */
  private final WrittenFilter written;

  /** The operator's metric group: the executor's metrics go there. */
  private final org.apache.flink.metrics.MetricGroup metrics;

  StatedAsyncKeyedStateBackend(
      StatedKeyedStateBackend<K> inner,
      org.apache.flink.api.common.ExecutionConfig executionConfig,
      long cacheBytes,
      long filterBytes,
      org.apache.flink.metrics.MetricGroup metrics) {
    this.inner = inner;
    this.executionConfig = executionConfig;
    this.cacheBytes = cacheBytes;
    this.written = new WrittenFilter(filterBytes);
    this.metrics = metrics;
  }

  /** The synchronous backend underneath (tests and the snapshot path). */
  StatedKeyedStateBackend<K> synchronousBackend() {
    return inner;
  }

  @Override
  public void setup(@Nonnull StateRequestHandler stateRequestHandler) {
    this.handler = stateRequestHandler;
  }

  @Override
  @SuppressWarnings("unchecked")
  public <N, S extends State, SV> S getOrCreateKeyedState(
      N defaultNamespace, TypeSerializer<N> namespaceSerializer, StateDescriptor<SV> stateDesc)
      throws Exception {
    InternalKeyedState<?, ?, ?> s = created.get(stateDesc.getStateId());
    if (s == null) {
      // TTL wraps the serializer of an initialized descriptor.
      stateDesc.initializeSerializerUnlessSet(executionConfig);
      s =
          TtlStateFactory.createStateAndWrapWithTtlIfEnabled(
              defaultNamespace, namespaceSerializer, stateDesc, this, inner.ttlTimeProvider());
      created.put(stateDesc.getStateId(), s);
    }
    return (S) s;
  }

  @Nonnull
  @Override
  @SuppressWarnings({"unchecked", "rawtypes"})
  public <N, S extends InternalKeyedState, SV> S createStateInternal(
      @Nonnull N defaultNamespace,
      @Nonnull TypeSerializer<N> namespaceSerializer,
      @Nonnull StateDescriptor<SV> stateDesc)
      throws Exception {
    Preconditions.checkNotNull(
        handler, "the stated async backend was not set up with a state request handler");
    stateDesc.initializeSerializerUnlessSet(executionConfig);
    String name = stateDesc.getStateId();
    // The synchronous backend registers the state (or checks the new
    // serializers against a restored one) in the same form as a V1 state
    // of the same kind, so that snapshots and restores are shared.
    org.apache.flink.api.common.state.StateDescriptor v1 =
        StateDescriptorUtils.transformFromV2ToV1(stateDesc);
    if (executor != null) {
      // A migration below rewrites the daemon's values: the cache's
      // writes of this state must be there first.
      executor.flushWrites(name);
      executor.awaitAnswers();
    }
    boolean fresh = !inner.states.containsKey(name);
    inner.createOrUpdateInternalState(
        namespaceSerializer, v1, StateSnapshotTransformFactory.noTransform());
    if (fresh) {
      // Neither restored nor registered before: the instance holds nothing
      // of it, and every write from now on goes through the executor.
      written.track(name);
    }
    if (executor != null) {
      // Registered again: a migration may have rewritten the daemon's values
      // in the new serializer's format, which cached bytes are not.
      executor.cache().invalidate(name);
    }
    StatedAsyncStates.Namespaces<N> ns =
        new StatedAsyncStates.Namespaces<>(
            name, namespaceSerializer, defaultNamespace, written.tracks(name));
    switch (stateDesc.getType()) {
      case VALUE:
        return (S) new StatedAsyncStates.Value<>(handler, name, stateDesc.getSerializer(), ns);
      case LIST:
        return (S) new StatedAsyncStates.ListS<>(handler, name, stateDesc.getSerializer(), ns);
      case MAP:
        {
          MapStateDescriptor md = (MapStateDescriptor) stateDesc;
          return (S)
              new StatedAsyncStates.MapS<>(
                  handler, name, md.getUserKeySerializer(), md.getSerializer(), ns);
        }
      case REDUCING:
        return (S)
            new StatedAsyncStates.Reducing<>(
                handler,
                name,
                ((ReducingStateDescriptor<SV>) stateDesc).getReduceFunction(),
                stateDesc.getSerializer(),
                ns);
      case AGGREGATING:
        return (S)
            new StatedAsyncStates.Aggregating<>(
                handler,
                name,
                ((AggregatingStateDescriptor) stateDesc).getAggregateFunction(),
                stateDesc.getSerializer(),
                ns);
      default:
        throw new FlinkRuntimeException(
            "the stated backend does not support state type " + stateDesc.getType());
    }
  }

  @Nonnull
  @Override
  public StateExecutor createStateExecutor() {
    // One per backend: every executor would share the instance's one
    // stream, and Flink makes one per operator anyway.
    if (executor == null) {
      executor =
          new StatedAsyncStateExecutor(
              inner.instance(),
              inner.getKeySerializer(),
              this::handlerForIterators,
              cacheBytes,
              written,
              metrics);
    }
    return executor;
  }

  /** The request handler, for the map iterators' continued loading (set up before first use). */
  private StateRequestHandler handlerForIterators() {
    return handler;
  }

  @Override
  public KeyGroupRange getKeyGroupRange() {
    return inner.getKeyGroupRange();
  }

  @Override
  public boolean requiresLegacySynchronousTimerSnapshots(SnapshotType checkpointType) {
    return inner.requiresLegacySynchronousTimerSnapshots(checkpointType);
  }

  @Nonnull
  @Override
  public RunnableFuture<SnapshotResult<KeyedStateHandle>> snapshot(
      long checkpointId,
      long timestamp,
      @Nonnull CheckpointStreamFactory streamFactory,
      @Nonnull CheckpointOptions checkpointOptions)
      throws Exception {
    if (executor != null) {
      // Writes complete when sent or cached: the cache's go out now, before
      // the barrier; every answer must be in, and no write refused.
      executor.awaitWrites();
    }
    return inner.snapshot(checkpointId, timestamp, streamFactory, checkpointOptions);
  }

  @Nonnull
  @Override
  public <T extends HeapPriorityQueueElement & PriorityComparable<? super T> & Keyed<?>>
      KeyGroupedInternalPriorityQueue<T> create(
          @Nonnull String stateName, @Nonnull TypeSerializer<T> byteOrderedElementSerializer) {
    return inner.create(stateName, byteOrderedElementSerializer);
  }

  @Override
  public <T extends HeapPriorityQueueElement & PriorityComparable<? super T> & Keyed<?>>
      KeyGroupedInternalPriorityQueue<T> create(
          @Nonnull String stateName,
          @Nonnull TypeSerializer<T> byteOrderedElementSerializer,
          boolean allowFutureMetadataUpdates) {
    return inner.create(stateName, byteOrderedElementSerializer, allowFutureMetadataUpdates);
  }

  @Override
  public void notifyCheckpointComplete(long checkpointId) throws Exception {
    inner.notifyCheckpointComplete(checkpointId);
  }

  @Override
  public void notifyCheckpointAborted(long checkpointId) throws Exception {
    inner.notifyCheckpointAborted(checkpointId);
  }

  @Override
  public void notifyCheckpointSubsumed(long checkpointId) throws Exception {
    inner.notifyCheckpointSubsumed(checkpointId);
  }

  @Override
  public String getBackendTypeIdentifier() {
    return inner.getBackendTypeIdentifier();
  }

  @Override
  public void dispose() {
    inner.dispose();
  }

  @Override
  public void close() throws IOException {
    inner.close();
  }

  @Override
  public String toString() {
    return "StatedAsyncKeyedStateBackend{" + inner + "}";
  }
}
