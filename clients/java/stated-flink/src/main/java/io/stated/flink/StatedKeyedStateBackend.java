package io.stated.flink;

import io.stated.api.v1.Op;
import io.stated.api.v1.Result;
import io.stated.api.v1.ScanKeysRequest;
import io.stated.api.v1.ScanKeysResponse;
import io.stated.api.v1.StateKey;
import io.stated.api.v1.StateKind;
import io.stated.client.Instance;
import io.stated.client.StatedClient;
import io.stated.client.StatedException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Spliterator;
import java.util.Spliterators;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.RunnableFuture;
import java.util.stream.Stream;
import java.util.stream.StreamSupport;
import javax.annotation.Nonnull;
import org.apache.flink.api.common.ExecutionConfig;
import org.apache.flink.api.common.state.AggregatingStateDescriptor;
import org.apache.flink.api.common.state.ReducingStateDescriptor;
import org.apache.flink.api.common.state.State;
import org.apache.flink.api.common.state.StateDescriptor;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.TypeSerializerSchemaCompatibility;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.core.memory.DataOutputSerializer;
import org.apache.flink.runtime.checkpoint.CheckpointOptions;
import org.apache.flink.runtime.checkpoint.SnapshotType;
import org.apache.flink.runtime.query.TaskKvStateRegistry;
import org.apache.flink.runtime.state.AbstractKeyedStateBackend;
import org.apache.flink.runtime.state.CheckpointStreamFactory;
import org.apache.flink.runtime.state.HeapPriorityQueuesManager;
import org.apache.flink.runtime.state.InternalKeyContext;
import org.apache.flink.runtime.state.KeyGroupedInternalPriorityQueue;
import org.apache.flink.runtime.state.Keyed;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.PriorityComparable;
import org.apache.flink.runtime.state.RegisteredKeyValueStateBackendMetaInfo;
import org.apache.flink.runtime.state.SavepointResources;
import org.apache.flink.runtime.state.SnapshotExecutionType;
import org.apache.flink.runtime.state.SnapshotResult;
import org.apache.flink.runtime.state.SnapshotStrategyRunner;
import org.apache.flink.runtime.state.StateSnapshotTransformer.StateSnapshotTransformFactory;
import org.apache.flink.runtime.state.StreamCompressionDecorator;
import org.apache.flink.runtime.state.VoidNamespace;
import org.apache.flink.runtime.state.heap.HeapPriorityQueueElement;
import org.apache.flink.runtime.state.heap.HeapPriorityQueueSetFactory;
import org.apache.flink.runtime.state.heap.HeapPriorityQueueSnapshotRestoreWrapper;
import org.apache.flink.runtime.state.metrics.LatencyTrackingStateConfig;
import org.apache.flink.runtime.state.metrics.SizeTrackingStateConfig;
import org.apache.flink.runtime.state.ttl.TtlTimeProvider;
import org.apache.flink.streaming.api.operators.InternalTimer;
import org.apache.flink.util.FlinkRuntimeException;
import org.apache.flink.util.StateMigrationException;

/**
 * The keyed state backend of one task on a stated daemon instance.
 *
 * <p>Keys and namespaces are sent as their Flink-serialized bytes with the key group Flink
 * computed; each Flink state is a daemon state of the same name (value, reducing and aggregating
 * state on a value state, list on a list, map on a map), registered when the task first asks for
 * it. Timers ({@link StatedOptions#TIMER_SERVICE}) are either daemon map states ({@link
 * StatedQueues}), in every snapshot as the other states, or Flink's heap priority queues in the
 * JVM, written by the timer service into raw keyed state at each checkpoint ({@link
 * #requiresLegacySynchronousTimerSnapshots}); queues a canonical savepoint of another backend held
 * as priority-queue states come filled from the restore ({@link StatedKeyedStateBackendBuilder}).
 */
public class StatedKeyedStateBackend<K> extends AbstractKeyedStateBackend<K> {
  /** A registered state: its Flink meta info and the state object made for it (null: not yet). */
  static final class Registered<K> {
    RegisteredKeyValueStateBackendMetaInfo<?, ?> meta;
    AbstractStatedState<K, ?, ?> state;

    /** Applied to the state's entries as a snapshot writes them (TTL's full-snapshot cleanup). */
    StateSnapshotTransformFactory<?> transform = StateSnapshotTransformFactory.noTransform();

    Registered(RegisteredKeyValueStateBackendMetaInfo<?, ?> meta) {
      this.meta = meta;
    }
  }

  private final StatedClient client;
  private final Instance inst;
  private final Daemon daemon;
  private final HeapPriorityQueuesManager priorityQueues;

  /** The daemon's timer queues; null when timers are heap queues in the JVM. */
  private final StatedQueues daemonQueues;

  final Map<String, Registered<K>> states = new LinkedHashMap<>();
  private final DataOutputSerializer keyOut = new DataOutputSerializer(64);
  private Object lastKey;
  private byte[] lastKeyBytes;
  private boolean disposed;
  private final StateCache cache;
  private final CacheMemory cacheMemory;

  /** Set when checkpoints are stated's incremental ones (an externally owned instance). */
  private ExternalSnapshots external;

  /** Which states a miss takes along ({@link ReadAhead}); null when it is off or the cache is. */
  private ReadAhead readAhead;

  /** The state objects by read-ahead id (the newest object of each name) and the ids by name. */
  private final List<AbstractStatedState<K, ?, ?>> byId = new ArrayList<>();

  private final Map<String, Integer> ids = new HashMap<>();

  /** Entries read along with a miss ({@link #readMiss}). */
  private long readAheadEntries;

  /**
   * The timer a daemon queue handed out last, and its queue: while the current key is its key, the
   * task is firing it (Flink's timer service sets the key, polls, then calls the operator).
   */
  private Object firingTimer;

  private StatedQueueSet<?> firingQueue;

  /** Keys of other timers, serialized ({@link #readMiss}). */
  private final DataOutputSerializer otherKeyOut = new DataOutputSerializer(64);

  /**
   * Timers due with the one firing whose keys' states a miss reads ahead: at most this many of its
   * key group's cached head, so about 40 KiB per request for a key's 1 KiB of state.
   */
  static final int DUE_TIMERS_AHEAD = 32;

  StatedKeyedStateBackend(
      TaskKvStateRegistry kvStateRegistry,
      TypeSerializer<K> keySerializer,
      ClassLoader userCodeClassLoader,
      ExecutionConfig executionConfig,
      TtlTimeProvider ttlTimeProvider,
      LatencyTrackingStateConfig latencyTrackingStateConfig,
      SizeTrackingStateConfig sizeTrackingStateConfig,
      CloseableRegistry cancelStreamRegistry,
      StreamCompressionDecorator compression,
      InternalKeyContext<K> keyContext,
      StatedClient client,
      Instance inst,
      Map<String, Registered<K>> restored,
      Map<String, HeapPriorityQueueSnapshotRestoreWrapper<?>> restoredQueues,
      HeapPriorityQueueSetFactory queueFactory,
      java.util.Collection<
              org.apache.flink.runtime.state.RegisteredPriorityQueueStateBackendMetaInfo<?>>
          restoredDaemonQueues,
      StateCache cache,
      CacheMemory cacheMemory) {
    super(
        kvStateRegistry,
        keySerializer,
        userCodeClassLoader,
        executionConfig,
        ttlTimeProvider,
        latencyTrackingStateConfig,
        sizeTrackingStateConfig,
        cancelStreamRegistry,
        compression,
        keyContext);
    this.client = client;
    this.inst = inst;
    this.daemon = new Daemon(inst);
    this.cache = cache;
    this.cacheMemory = cacheMemory;
    // At least one: a daemon of revision 1 or later (the client checked at
    // Open) advertises its limit, which is never below one.
    this.maxViews = Math.max(1, inst.maxViews());
    this.views = new java.util.concurrent.Semaphore(maxViews);
    // Flink's manager of heap queues by name: a restored queue is returned
    // (its serializer checked against the new one) instead of a new, empty one.
    this.priorityQueues =
        new HeapPriorityQueuesManager(
            restoredQueues, queueFactory, keyGroupRange, numberOfKeyGroups);
    this.daemonQueues =
        restoredDaemonQueues == null
            ? null
            : new StatedQueues(
                daemon, keyGroupRange, numberOfKeyGroups, restoredDaemonQueues, this::timerPolled);
    this.states.putAll(restored);
  }

  /** The daemon's timer queues, or null when timers are heap queues in the JVM. */
  StatedQueues daemonQueues() {
    return daemonQueues;
  }

  /** Checkpoints become stated's incremental ones through {@code e} (set by the builder). */
  void setExternal(ExternalSnapshots e) {
    this.external = e;
  }

  Daemon daemon() {
    return daemon;
  }

  Instance instance() {
    return inst;
  }

  /** The write-through cache of this backend's states (see {@link StateCache}). */
  StateCache cache() {
    return cache;
  }

  /** Where the cache's size came from and what it reserved (see {@link CacheMemory}). */
  CacheMemory cacheMemory() {
    return cacheMemory;
  }

  /** The current key's serialized bytes (cached while the key object stays the same). */
  byte[] currentKeyBytes() {
    K key = getCurrentKey();
    if (key == null) {
      throw new NullPointerException(
          "No key set. This method should not be called outside of a keyed context.");
    }
    if (key != lastKey || lastKeyBytes == null) {
      keyOut.clear();
      try {
        keySerializer.serialize(key, keyOut);
      } catch (IOException e) {
        throw new FlinkRuntimeException("cannot serialize key " + key, e);
      }
      lastKeyBytes = keyOut.getCopyOfBuffer();
      lastKey = key;
    }
    return lastKeyBytes;
  }

  @Override
  public void setCurrentKey(K newKey) {
    super.setCurrentKey(newKey);
    newContext(newKey);
  }

  @Override
  public void setCurrentKeyAndKeyGroup(K newKey, int newKeyGroupIndex) {
    super.setCurrentKeyAndKeyGroup(newKey, newKeyGroupIndex);
    newContext(newKey);
  }

  private void newContext(K newKey) {
    lastKeyBytes = null;
    if (readAhead != null) {
      readAhead.endContext();
    }
    if (firingTimer != null && !newKey.equals(((InternalTimer<?, ?>) firingTimer).getKey())) {
      firingTimer = null;
      firingQueue = null;
    }
  }

  /** A daemon timer queue handed out {@code element} ({@link StatedQueueSet.Polled}). */
  private void timerPolled(StatedQueueSet<?> set, Object element) {
    if (readAhead != null && element instanceof InternalTimer) {
      firingTimer = element;
      firingQueue = set;
    }
  }

  /** Switches reading ahead on or off ({@link StatedOptions#READ_AHEAD}); off without a cache. */
  void setReadAhead(boolean on) {
    readAhead = on && cache.enabled() ? new ReadAhead() : null;
  }

  /** Records a read of the state with this read-ahead id under the current key. */
  void noteRead(int id) {
    if (readAhead != null) {
      readAhead.read(id);
    }
  }

  /** Entries read along with misses so far. */
  long readAheadEntries() {
    return readAheadEntries;
  }

  /**
   * Reads {@code op}, a read of state {@code s} at (key, ns) that missed the cache, and in the same
   * request the entries at (key, ns) of the states {@link ReadAhead} takes along with {@code s},
   * and, while a daemon timer fires, those and {@code s}'s of the keys of the timers due with it;
   * only entries the cache neither holds nor knows to be absent. Their answers go into the cache.
   * Returns the answer to {@code op}.
   */
  Result readMiss(AbstractStatedState<K, ?, ?> s, Op op, int keyGroup, byte[] key, byte[] ns) {
    if (readAhead == null) {
      return daemon.read(op);
    }
    long along = readAhead.along(s.id);
    Ahead ahead = new Ahead(op);
    ahead.add(along, keyGroup, key, ns);
    InternalTimer<?, ?> t = (InternalTimer<?, ?>) firingTimer;
    if (t != null
        && t.getNamespace() instanceof VoidNamespace
        && s.currentNamespace() instanceof VoidNamespace
        && t.getKey().equals(getCurrentKey())) {
      // Firing a timer: the timers due at the same time fire next, one
      // after another, and read the same states of their keys. Read those
      // too, so that their firings find them cached.
      long states = s.id < ReadAhead.MAX_STATES ? along | (1L << s.id) : along;
      for (Object o : firingQueue.cachedHead(DUE_TIMERS_AHEAD)) {
        InternalTimer<?, ?> u = (InternalTimer<?, ?>) o;
        if (u.getTimestamp() != t.getTimestamp()) {
          break; // the head is in timestamp order
        }
        if (u.getNamespace() instanceof VoidNamespace && !u.getKey().equals(t.getKey())) {
          ahead.add(states, firingQueue.keyGroup(), serializeOtherKey(u.getKey()), ns);
        }
      }
    }
    if (ahead.taken.isEmpty()) {
      return daemon.read(op);
    }
    List<CompletableFuture<Result>> fs = daemon.sendReads(ahead.ops);
    Result first = Daemon.await(fs.get(0));
    for (int i = 0; i < ahead.taken.size(); i++) {
      // A read ahead the daemon refused (its answer would pass the
      // response size limit, say) is left out of the cache, so the
      // state's own read asks again; it never fails the read that missed.
      Result r = Daemon.resultOrNull(fs.get(i + 1));
      if (r != null) {
        ahead.taken.get(i).cacheAhead(ahead.keys.get(i), ns, r);
        readAheadEntries++;
      }
    }
    return first;
  }

  /** The reads of one request of {@link #readMiss}: the miss's first, then those read ahead. */
  private final class Ahead {
    final List<Op> ops = new ArrayList<>();
    final List<AbstractStatedState<K, ?, ?>> taken = new ArrayList<>();
    final List<byte[]> keys = new ArrayList<>();

    Ahead(Op miss) {
      ops.add(miss);
    }

    /**
     * Adds the reads of the states in {@code states} (a bit per id) at (key, ns) that are at that
     * namespace, not cached and not known absent.
     */
    void add(long states, int keyGroup, byte[] key, byte[] ns) {
      for (long b = states; b != 0; b &= b - 1) {
        AbstractStatedState<K, ?, ?> o = byId.get(Long.numberOfTrailingZeros(b));
        if (!o.atNamespace(ns)
            || cache.peek(o.name, key, ns) != null
            || cache.knownAbsent(o.name, key, ns)) {
          continue;
        }
        ops.add(o.aheadOp(keyGroup, key, ns));
        taken.add(o);
        keys.add(key);
      }
    }
  }

  @SuppressWarnings("unchecked")
  private byte[] serializeOtherKey(Object key) {
    otherKeyOut.clear();
    try {
      keySerializer.serialize((K) key, otherKeyOut);
    } catch (IOException e) {
      throw new FlinkRuntimeException("cannot serialize key " + key, e);
    }
    return otherKeyOut.getCopyOfBuffer();
  }

  static StateKind daemonKind(StateDescriptor.Type t) {
    switch (t) {
      case VALUE:
      case REDUCING:
      case AGGREGATING:
        return StateKind.STATE_KIND_VALUE;
      case LIST:
        return StateKind.STATE_KIND_LIST;
      case MAP:
        return StateKind.STATE_KIND_MAP;
      default:
        throw new FlinkRuntimeException("the stated backend does not support state type " + t);
    }
  }

  /** Registers states in the daemon (a no-op for ones registered already). */
  void registerInDaemon(List<RegisteredKeyValueStateBackendMetaInfo<?, ?>> metas) {
    registerInDaemon(inst, metas);
  }

  static void registerInDaemon(
      Instance inst, List<RegisteredKeyValueStateBackendMetaInfo<?, ?>> metas) {
    List<io.stated.api.v1.StateDescriptor> ds = new ArrayList<>();
    for (RegisteredKeyValueStateBackendMetaInfo<?, ?> m : metas) {
      ds.add(
          io.stated.api.v1.StateDescriptor.newBuilder()
              .setName(m.getName())
              .setKind(daemonKind(m.getStateType()))
              .build());
    }
    // Writes queued before must reach the daemon after the states exist
    // only if they use them; flushing first keeps the order simple.
    inst.flush();
    StatedException.await(inst.registerStates(ds));
  }

  @Override
  @Nonnull
  public <N, SV, SEV, S extends State, IS extends S> IS createOrUpdateInternalState(
      @Nonnull TypeSerializer<N> namespaceSerializer,
      @Nonnull StateDescriptor<S, SV> stateDesc,
      @Nonnull StateSnapshotTransformFactory<SEV> snapshotTransformFactory)
      throws Exception {
    String name = stateDesc.getName();
    TypeSerializer<SV> stateSerializer = stateDesc.getSerializer();
    Registered<K> r = states.get(name);
    RegisteredKeyValueStateBackendMetaInfo<N, SV> meta;
    if (r != null) {
      @SuppressWarnings("unchecked")
      RegisteredKeyValueStateBackendMetaInfo<N, SV> m =
          (RegisteredKeyValueStateBackendMetaInfo<N, SV>) r.meta;
      meta = m;
      try {
        meta.checkStateMetaInfo(stateDesc);
      } catch (IllegalStateException e) {
        throw new StateMigrationException(e.getMessage());
      }
      TypeSerializerSchemaCompatibility<N> nc = meta.updateNamespaceSerializer(namespaceSerializer);
      if (nc.isCompatibleAfterMigration() || nc.isIncompatible()) {
        throw new StateMigrationException(
            "For heap backends, the new namespace serializer of state "
                + name
                + " must be compatible with the old one; the stated backend cannot migrate"
                + " namespaces.");
      }
      TypeSerializerSchemaCompatibility<SV> sc = meta.updateStateSerializer(stateSerializer);
      if (sc.isIncompatible()) {
        throw new StateMigrationException(
            "The new state serializer of state "
                + name
                + " ("
                + stateSerializer
                + ") must not be incompatible with the old state serializer.");
      }
      if (sc.isCompatibleAfterMigration()) {
        new StatedMigration<>(this, meta).run();
        // The cached bytes are in the previous serializer's format.
        cache.invalidate(name);
      }
    } else {
      meta =
          new RegisteredKeyValueStateBackendMetaInfo<>(
              stateDesc.getType(), name, namespaceSerializer, stateSerializer);
      registerInDaemon(List.of(meta));
      r = new Registered<>(meta);
      states.put(name, r);
      // Not restored: the (fresh) instance holds nothing of this state, so
      // the cache, which sees every write from now on, has all of it.
      cache.markComplete(name);
    }
    AbstractStatedState<K, N, SV> state = makeState(stateDesc, meta);
    r.state = state;
    Integer id = ids.get(name);
    if (id == null) {
      id = byId.size();
      ids.put(name, id);
      byId.add(state);
    } else {
      byId.set(id, state);
    }
    state.id = id;
    r.transform = wrapTransform(stateDesc, snapshotTransformFactory);
    @SuppressWarnings("unchecked")
    IS is = (IS) state;
    return is;
  }

  /** As the heap backend does: list and map transformers work element by element. */
  @SuppressWarnings({"unchecked", "rawtypes"})
  private static StateSnapshotTransformFactory<?> wrapTransform(
      StateDescriptor<?, ?> desc, StateSnapshotTransformFactory<?> f) {
    if (desc instanceof org.apache.flink.api.common.state.ListStateDescriptor) {
      return new org.apache.flink.runtime.state.StateSnapshotTransformers
          .ListStateSnapshotTransformFactory(f);
    }
    if (desc instanceof org.apache.flink.api.common.state.MapStateDescriptor) {
      return new org.apache.flink.runtime.state.StateSnapshotTransformers
          .MapStateSnapshotTransformFactory(f);
    }
    return f;
  }

  TtlTimeProvider ttlTimeProvider() {
    return ttlTimeProvider;
  }

  @SuppressWarnings({"unchecked", "rawtypes"})
  private <N, SV> AbstractStatedState<K, N, SV> makeState(
      StateDescriptor<?, SV> desc, RegisteredKeyValueStateBackendMetaInfo<N, SV> meta) {
    TypeSerializer<N> ns = meta.getNamespaceSerializer();
    TypeSerializer<SV> vs = meta.getStateSerializer();
    String name = desc.getName();
    switch (desc.getType()) {
      case VALUE:
        return new StatedValueState<>(
            this, name, ns, vs, ((ValueStateDescriptor<SV>) desc).getDefaultValue());
      case LIST:
        return (AbstractStatedState) new StatedListState<>(this, name, ns, (TypeSerializer) vs);
      case MAP:
        return (AbstractStatedState) new StatedMapState<>(this, name, ns, (TypeSerializer) vs);
      case REDUCING:
        return new StatedReducingState<>(
            this, name, ns, vs, ((ReducingStateDescriptor<SV>) desc).getReduceFunction());
      case AGGREGATING:
        return new StatedAggregatingState<>(
            this, name, ns, vs, ((AggregatingStateDescriptor) desc).getAggregateFunction());
      default:
        throw new FlinkRuntimeException(
            "State " + desc.getClass() + " is not supported by " + getClass());
    }
  }

  @Nonnull
  @Override
  public <T extends HeapPriorityQueueElement & PriorityComparable<? super T> & Keyed<?>>
      KeyGroupedInternalPriorityQueue<T> create(
          @Nonnull String stateName, @Nonnull TypeSerializer<T> byteOrderedElementSerializer) {
    return create(stateName, byteOrderedElementSerializer, false);
  }

  @Override
  public <T extends HeapPriorityQueueElement & PriorityComparable<? super T> & Keyed<?>>
      KeyGroupedInternalPriorityQueue<T> create(
          @Nonnull String stateName,
          @Nonnull TypeSerializer<T> byteOrderedElementSerializer,
          boolean allowFutureMetadataUpdates) {
    if (daemonQueues != null) {
      return daemonQueues.create(
          stateName, byteOrderedElementSerializer, allowFutureMetadataUpdates);
    }
    return priorityQueues.createOrUpdate(
        stateName, byteOrderedElementSerializer, allowFutureMetadataUpdates);
  }

  @Override
  public boolean requiresLegacySynchronousTimerSnapshots(SnapshotType checkpointType) {
    // Daemon queues are states of the snapshot; heap queues are written by
    // the timer service.
    return daemonQueues == null;
  }

  @Override
  public <N> Stream<K> getKeys(String state, N namespace) {
    return keyStream(state, namespace, true).map(t -> t.f0);
  }

  @Override
  public <N> Stream<K> getKeys(List<String> states, N namespace) {
    return states.stream().flatMap(s -> getKeys(s, namespace)).distinct();
  }

  @Override
  public <N> Stream<Tuple2<K, N>> getKeysAndNamespaces(String state) {
    return keyStream(state, null, false);
  }

  /**
   * The keys (and namespaces) of a state, paged through ScanKeys. Writes queued before are sent and
   * answered first, since ScanKeys sees only answered requests.
   */
  private <N> Stream<Tuple2<K, N>> keyStream(String state, N namespace, boolean oneNamespace) {
    Registered<K> r = states.get(state);
    if (r == null) {
      return Stream.empty();
    }
    daemon.sync();
    @SuppressWarnings("unchecked")
    TypeSerializer<N> nsSer = (TypeSerializer<N>) r.meta.getNamespaceSerializer();
    ScanKeysRequest.Builder base = ScanKeysRequest.newBuilder().setState(state).setLimit(1000);
    if (oneNamespace) {
      DataOutputSerializer o = new DataOutputSerializer(32);
      try {
        nsSer.serialize(namespace, o);
      } catch (IOException e) {
        throw new FlinkRuntimeException(e);
      }
      base.setNamespace(com.google.protobuf.ByteString.copyFrom(o.getCopyOfBuffer()));
    }
    TypeSerializer<K> ks = keySerializer.duplicate();
    TypeSerializer<N> ns = nsSer.duplicate();
    Iterator<Tuple2<K, N>> it =
        new Iterator<Tuple2<K, N>>() {
          private List<StateKey> page = List.of();
          private int pos;
          private com.google.protobuf.ByteString cursor = com.google.protobuf.ByteString.EMPTY;
          private boolean more = true;

          @Override
          public boolean hasNext() {
            while (pos >= page.size() && more) {
              ScanKeysResponse resp =
                  StatedException.await(inst.scanKeys(base.clone().setCursor(cursor).build()));
              page = resp.getKeysList();
              pos = 0;
              more = resp.getMore();
              cursor = resp.getCursor();
            }
            return pos < page.size();
          }

          @Override
          public Tuple2<K, N> next() {
            if (!hasNext()) {
              throw new NoSuchElementException();
            }
            StateKey k = page.get(pos++);
            try {
              K key = ks.deserialize(new DataInputDeserializer(k.getKey().toByteArray()));
              N n =
                  oneNamespace
                      ? namespace
                      : ns.deserialize(new DataInputDeserializer(k.getNamespace().toByteArray()));
              return Tuple2.of(key, n);
            } catch (IOException e) {
              throw new FlinkRuntimeException("cannot deserialize a key of state " + state, e);
            }
          }
        };
    return StreamSupport.stream(
        Spliterators.spliteratorUnknownSize(it, Spliterator.ORDERED | Spliterator.NONNULL), false);
  }

  /** The entries of every state, counted by the daemon (for tests). */
  public int numKeyValueStateEntries() {
    daemon.sync();
    return StatedException.await(inst.countEntries("")).intValue();
  }

  static final long VIEW_WAIT_MILLIS = 60_000;

  /** How long dispose waits for the daemon to stop the uploads of unfinished snapshots. */
  static final long ABANDON_WAIT_MILLIS = 10_000;

  /**
   * The views this backend holds at most at once: the limit per instance the daemon advertised at
   * Open. A snapshot whose view would exceed it waits for an earlier snapshot's asynchronous part
   * to end (Flink may overlap checkpoints), at most {@link #VIEW_WAIT_MILLIS}.
   */
  private final int maxViews;

  private final java.util.concurrent.Semaphore views;

  /** Takes a read view as a barrier on the stream (see {@link StatedSnapshotStrategy}). */
  io.stated.api.v1.ViewInfo takeView() {
    long deadline = System.nanoTime() + VIEW_WAIT_MILLIS * 1_000_000L;
    try {
      if (!views.tryAcquire(VIEW_WAIT_MILLIS, java.util.concurrent.TimeUnit.MILLISECONDS)) {
        throw new FlinkRuntimeException(
            "the stated backend holds "
                + maxViews
                + " snapshot views whose asynchronous parts did not end within "
                + VIEW_WAIT_MILLIS
                + " ms; too many checkpoints overlap");
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new FlinkRuntimeException("interrupted waiting for a snapshot view", e);
    }
    while (true) {
      try {
        return Daemon.await(inst.view(0));
      } catch (StatedException e) {
        // A view this backend released may not be freed in the daemon yet
        // (the release is answered after the scan's stream ends); wait for
        // it, within the same deadline.
        if (e.code() != io.grpc.Status.Code.RESOURCE_EXHAUSTED || System.nanoTime() > deadline) {
          views.release();
          throw e;
        }
        try {
          Thread.sleep(20);
        } catch (InterruptedException ie) {
          Thread.currentThread().interrupt();
          views.release();
          throw e;
        }
      }
    }
  }

  /** Frees a view taken by {@link #takeView} (once; by the snapshot's resources). */
  void releaseView(io.stated.api.v1.ViewInfo view) {
    try {
      Daemon.await(inst.releaseView(view.getViewId()));
    } catch (StatedException e) {
      // Gone already (timed out, or the instance closed): nothing to free.
    } finally {
      views.release();
    }
  }

  @Nonnull
  @Override
  public RunnableFuture<SnapshotResult<KeyedStateHandle>> snapshot(
      long checkpointId,
      long timestamp,
      @Nonnull CheckpointStreamFactory streamFactory,
      @Nonnull CheckpointOptions checkpointOptions)
      throws Exception {
    if (external != null && !checkpointOptions.getCheckpointType().isSavepoint()) {
      // Only FORWARD_BACKWARD may reference files of earlier checkpoints;
      // FULL_CHECKPOINT (after a NO_CLAIM restore) is FORWARD.
      boolean full =
          checkpointOptions.getCheckpointType().getSharingFilesStrategy()
              != SnapshotType.SharingFilesStrategy.FORWARD_BACKWARD;
      return new SnapshotStrategyRunner<>(
              "stated incremental snapshot",
              new StatedIncrementalSnapshotStrategy<>(this, external, full),
              cancelStreamRegistry,
              SnapshotExecutionType.ASYNCHRONOUS)
          .snapshot(checkpointId, timestamp, streamFactory, checkpointOptions);
    }
    return new SnapshotStrategyRunner<>(
            "stated backend snapshot",
            new StatedSnapshotStrategy<>(this),
            cancelStreamRegistry,
            SnapshotExecutionType.ASYNCHRONOUS)
        .snapshot(checkpointId, timestamp, streamFactory, checkpointOptions);
  }

  @Nonnull
  @Override
  public SavepointResources<K> savepoint() throws Exception {
    return new SavepointResources<>(
        new StatedSnapshotStrategy<>(this).syncPrepareResources(0),
        SnapshotExecutionType.ASYNCHRONOUS);
  }

  @Override
  public String getBackendTypeIdentifier() {
    return "stated";
  }

  @Override
  public void notifyCheckpointComplete(long checkpointId) {
    if (external != null) {
      external.confirm(checkpointId);
    }
  }

  @Override
  public void notifyCheckpointAborted(long checkpointId) {
    if (external != null) {
      external.forget(checkpointId, false);
    }
  }

  @Override
  public void notifyCheckpointSubsumed(long checkpointId) {
    if (external != null) {
      external.forget(checkpointId, true);
    }
  }

  @Override
  public void dispose() {
    if (disposed) {
      return;
    }
    disposed = true;
    cache.close();
    cacheMemory.release();
    super.dispose();
    if (external != null) {
      // A snapshot the task's end cut short: its files reach no Flink handle.
      external.abandonPending(ABANDON_WAIT_MILLIS);
    }
    try {
      StatedException.await(inst.closeInstance());
    } catch (StatedException e) {
      // The daemon may be gone already (a failover): the instance then
      // closes itself once its stream is idle.
    } finally {
      client.close();
    }
  }

  @Override
  public void close() throws IOException {
    super.close();
  }

  @Override
  public String toString() {
    return "StatedKeyedStateBackend{" + client.where() + ", " + keyGroupRange + "}";
  }
}
