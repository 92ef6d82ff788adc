package io.stated.flink;

import com.google.protobuf.ByteString;
import io.stated.api.v1.KeyGroupRange;
import io.stated.api.v1.OpenRequest;
import io.stated.api.v1.StateKind;
import io.stated.api.v1.TaskId;
import io.stated.api.v1.ViewEntry;
import io.stated.client.Instance;
import io.stated.client.Loader;
import io.stated.client.StatedClient;
import io.stated.client.StatedException;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.UUID;
import java.util.stream.Collectors;
import org.apache.flink.api.common.state.StateDescriptor;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.core.memory.DataOutputSerializer;
import org.apache.flink.runtime.execution.Environment;
import org.apache.flink.runtime.state.AbstractStateBackend;
import org.apache.flink.runtime.state.BackendBuildingException;
import org.apache.flink.runtime.state.CompositeKeySerializationUtils;
import org.apache.flink.runtime.state.IncrementalKeyedStateHandle;
import org.apache.flink.runtime.state.IncrementalRemoteKeyedStateHandle;
import org.apache.flink.runtime.state.InternalKeyContextImpl;
import org.apache.flink.runtime.state.KeyExtractorFunction;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.RegisteredKeyValueStateBackendMetaInfo;
import org.apache.flink.runtime.state.RegisteredPriorityQueueStateBackendMetaInfo;
import org.apache.flink.runtime.state.StateBackend;
import org.apache.flink.runtime.state.StateSerializerProvider;
import org.apache.flink.runtime.state.heap.HeapPriorityQueueElement;
import org.apache.flink.runtime.state.heap.HeapPriorityQueueSet;
import org.apache.flink.runtime.state.heap.HeapPriorityQueueSetFactory;
import org.apache.flink.runtime.state.heap.HeapPriorityQueueSnapshotRestoreWrapper;
import org.apache.flink.runtime.state.metainfo.StateMetaInfoSnapshot;
import org.apache.flink.runtime.state.restore.FullSnapshotRestoreOperation;
import org.apache.flink.runtime.state.restore.KeyGroup;
import org.apache.flink.runtime.state.restore.KeyGroupEntry;
import org.apache.flink.runtime.state.restore.SavepointRestoreResult;
import org.apache.flink.runtime.state.restore.ThrowingIterator;

/**
 * Opens the task's instance in the daemon and, for a restore, loads it from Flink's canonical
 * key-grouped handles (checkpoints and savepoints of this backend, or canonical savepoints of
 * another), key group by key group of this task's range.
 *
 * <p>Key/value states go to the daemon. Priority queues (timers) go to the daemon too when the
 * timer service is {@code daemon} ({@link StatedQueues}): a canonical snapshot's {@code
 * PRIORITY_QUEUE} states (this backend's, HashMap's or RocksDB's) are loaded into daemon map
 * states, and an incremental checkpoint's are in its files. With timers on the heap they stay in
 * the JVM as Flink's heap queues: a canonical savepoint's {@code PRIORITY_QUEUE} states are loaded
 * into those queues here, and the timer service finds them when it asks the backend for its queues
 * by name; the backend's own snapshots then hold no such states (its timer service writes timers
 * into raw keyed state).
 */
final class StatedKeyedStateBackendBuilder<K> {
  private final StatedStateBackend config;
  private final StateBackend.KeyedStateBackendParameters<K> p;
  private final boolean withCache;
  private final boolean daemonTimers;

  /** Restored timer queues kept in the daemon, by name (daemon timers only). */
  private final Map<String, RegisteredPriorityQueueStateBackendMetaInfo<?>> daemonQueues =
      new java.util.LinkedHashMap<>();

  /**
   * {@code withCache}: whether the backend's synchronous states read through a {@link StateCache}
   * (the asynchronous backend's states do not, so it gets none and reserves no memory); {@code
   * daemonTimers}: whether its timer queues are daemon states ({@link StatedQueues}) rather than
   * heap queues.
   */
  StatedKeyedStateBackendBuilder(
      StatedStateBackend config,
      StateBackend.KeyedStateBackendParameters<K> p,
      boolean withCache,
      boolean daemonTimers) {
    this.config = config;
    this.p = p;
    this.withCache = withCache;
    this.daemonTimers = daemonTimers;
  }

  StatedKeyedStateBackend<K> build() throws IOException {
    Environment env = p.getEnv();
    CacheMemory memory = CacheMemory.of(config, p, withCache);
    try {
      return build(env, memory);
    } catch (IOException | RuntimeException e) {
      memory.release();
      throw e;
    }
  }

  private StatedKeyedStateBackend<K> build(Environment env, CacheMemory memory) throws IOException {
    StateCache cache = new StateCache(memory.budget);
    // Restore first: it checks the key serializer against the snapshot's
    // and may reconfigure it, and the backend must use the result.
    StateSerializerProvider<K> keyProvider =
        StateSerializerProvider.fromNewRegisteredSerializer(p.getKeySerializer());
    Map<String, StatedKeyedStateBackend.Registered<K>> restored = new java.util.LinkedHashMap<>();
    // stated's incremental checkpoints are restored by the daemon from their
    // task handles at Open; any other handle is loaded after it.
    List<IncrementalRemoteKeyedStateHandle> incremental = new ArrayList<>();
    List<KeyedStateHandle> full = new ArrayList<>();
    for (KeyedStateHandle h :
        p.getStateHandles() == null ? List.<KeyedStateHandle>of() : p.getStateHandles()) {
      if (h == null
          || h.getKeyGroupRange().getIntersection(p.getKeyGroupRange()).getNumberOfKeyGroups()
              == 0) {
        continue;
      }
      if (h instanceof IncrementalRemoteKeyedStateHandle) {
        incremental.add((IncrementalRemoteKeyedStateHandle) h);
      } else if (h instanceof IncrementalKeyedStateHandle) {
        throw new BackendBuildingException(
            "the stated backend cannot restore "
                + h.getClass().getSimpleName()
                + " (a local or changelog copy of an incremental checkpoint); switch local"
                + " recovery and the changelog off");
      } else {
        full.add(h);
      }
    }
    if (!incremental.isEmpty() && !full.isEmpty()) {
      throw new BackendBuildingException(
          "the task got both incremental ("
              + incremental.size()
              + ") and full ("
              + full.size()
              + ") keyed state handles to restore; the stated backend restores one kind at once");
    }
    if (!incremental.isEmpty() && !config.incremental()) {
      throw new BackendBuildingException(
          "the checkpoint to restore holds stated incremental checkpoints ("
              + incremental.get(0).getClass().getSimpleName()
              + "), which need "
              + StatedOptions.INCREMENTAL.key()
              + ": true (and "
              + StatedOptions.BACKEND_KIND.key()
              + ": lsm)");
    }
    List<ByteString> taskHandles = new ArrayList<>();
    java.util.Set<String> restoredShared = new java.util.HashSet<>();
    List<RegisteredKeyValueStateBackendMetaInfo<?, ?>> incrementalStates = new ArrayList<>();
    try {
      readIncremental(
          incremental, keyProvider, restored, taskHandles, restoredShared, incrementalStates);
    } catch (Exception e) {
      if (e instanceof org.apache.flink.util.StateMigrationException) {
        throw new BackendBuildingException(e.getMessage(), e);
      }
      throw new BackendBuildingException(
          "cannot read the stated incremental checkpoint to restore: " + e.getMessage(), e);
    }
    StatedClient client = config.connect();
    Instance inst;
    try {
      // Flink owns the checkpoints, so the daemon's instance is only working
      // state: a fresh, unique one per backend (two backends of one task may
      // coexist in tests and during a restart), with the key groups Flink
      // computed, which the daemon checks by range only.
      TaskId task =
          TaskId.newBuilder()
              .setJob(p.getJobID().toString())
              .setOperator(operatorName(p.getOperatorIdentifier()))
              .setSubtask(env.getTaskInfo().getIndexOfThisSubtask())
              .build();
      OpenRequest req =
          OpenRequest.newBuilder()
              .setTask(task)
              .setMaxParallelism(p.getNumberOfKeyGroups())
              .setKeyGroups(
                  KeyGroupRange.newBuilder()
                      .setStart(p.getKeyGroupRange().getStartKeyGroup())
                      .setEnd(p.getKeyGroupRange().getEndKeyGroup()))
              .setBackendKind(config.backendKind())
              .setReplace(true)
              .build();
      inst =
          StatedException.await(
              config.incremental()
                  ? client.openExternal(
                      req, config.externalRoot(p.getJobID().toString()), taskHandles)
                  : client.open(req));
      if (!incrementalStates.isEmpty()) {
        StatedKeyedStateBackend.registerInDaemon(inst, incrementalStates);
      }
      StatedQueues.registerInDaemon(inst, daemonQueues.keySet());
    } catch (StatedException e) {
      client.close();
      throw new BackendBuildingException(
          "cannot open the task's state in the stated daemon: " + e.getMessage(), e);
    }
    Map<String, HeapPriorityQueueSnapshotRestoreWrapper<?>> queues = new HashMap<>();
    HeapPriorityQueueSetFactory queueFactory =
        new HeapPriorityQueueSetFactory(
            p.getKeyGroupRange(), p.getNumberOfKeyGroups(), QUEUE_CAPACITY);
    try {
      restore(
          inst, keyProvider, restored, queues, queueFactory, full, new RestoreCacheWarmer(cache));
    } catch (Exception e) {
      try {
        StatedException.await(inst.closeInstance());
      } catch (StatedException ignored) {
        // The failure below is the one to report.
      }
      client.close();
      if (e instanceof org.apache.flink.util.StateMigrationException) {
        throw new BackendBuildingException(e.getMessage(), e);
      }
      throw new BackendBuildingException(
          "cannot restore the task's keyed state into the stated daemon: " + e.getMessage(), e);
    }
    StatedKeyedStateBackend<K> backend =
        new StatedKeyedStateBackend<>(
            p.getKvStateRegistry(),
            keyProvider.currentSchemaSerializer(),
            env.getUserCodeClassLoader().asClassLoader(),
            env.getExecutionConfig(),
            p.getTtlTimeProvider(),
            config.latencyTracking(p.getMetricGroup()),
            config.sizeTracking(p.getMetricGroup()),
            // The backend's own registry, closed by dispose(): the one in the
            // parameters is the restore's, which Flink's task closes once the
            // backend is built, so snapshots registered there would fail.
            new CloseableRegistry(),
            AbstractStateBackend.getCompressionDecorator(env.getExecutionConfig()),
            new InternalKeyContextImpl<>(p.getKeyGroupRange(), p.getNumberOfKeyGroups()),
            client,
            inst,
            restored,
            queues,
            queueFactory,
            daemonTimers ? daemonQueues.values() : null,
            cache,
            memory);
    backend.setReadAhead(config.readAhead());
    if (config.incremental()) {
      backend.setExternal(new ExternalSnapshots(inst, restoredShared));
    }
    return backend;
  }

  /**
   * Reads the meta streams of stated incremental handles: checks the key serializer against the
   * first one's, as a full restore does, registers their states (the union, as several old
   * subtasks' handles after a rescale hold), and collects the daemon's task handles and the shared
   * files the daemon may reuse.
   */
  private void readIncremental(
      List<IncrementalRemoteKeyedStateHandle> handles,
      StateSerializerProvider<K> keyProvider,
      Map<String, StatedKeyedStateBackend.Registered<K>> states,
      List<ByteString> taskHandles,
      java.util.Set<String> shared,
      List<RegisteredKeyValueStateBackendMetaInfo<?, ?>> fresh)
      throws Exception {
    boolean keyChecked = false;
    for (IncrementalRemoteKeyedStateHandle h : handles) {
      IncrementalMeta m =
          IncrementalMeta.read(h, p.getEnv().getUserCodeClassLoader().asClassLoader());
      if (!keyChecked) {
        @SuppressWarnings("unchecked")
        org.apache.flink.api.common.typeutils.TypeSerializerSnapshot<K> ks =
            (org.apache.flink.api.common.typeutils.TypeSerializerSnapshot<K>)
                m.proxy().getKeySerializerSnapshot();
        org.apache.flink.api.common.typeutils.TypeSerializerSchemaCompatibility<K> c =
            keyProvider.setPreviousSerializerSnapshotForRestoredState(ks);
        if (c.isCompatibleAfterMigration() || c.isIncompatible()) {
          throw new org.apache.flink.util.StateMigrationException(
              "The new key serializer must be compatible with the one of the stated incremental"
                  + " checkpoint to restore.");
        }
        keyChecked = true;
      }
      for (StateMetaInfoSnapshot s : m.proxy().getStateMetaInfoSnapshots()) {
        if (s.getBackendStateType() == StateMetaInfoSnapshot.BackendStateType.PRIORITY_QUEUE) {
          if (!daemonTimers) {
            throw new IOException(
                "the stated incremental checkpoint holds timer queue "
                    + s.getName()
                    + " in the daemon's files, but this backend keeps timers on the heap ("
                    + StatedOptions.TIMER_SERVICE.key()
                    + ": heap); restore with "
                    + StatedOptions.TIMER_SERVICE.key()
                    + ": daemon, or from a canonical savepoint");
          }
          daemonQueues.putIfAbsent(
              s.getName(), new RegisteredPriorityQueueStateBackendMetaInfo<>(s));
          continue;
        }
        if (s.getBackendStateType() != StateMetaInfoSnapshot.BackendStateType.KEY_VALUE) {
          throw new IOException(
              "the stated incremental checkpoint holds state "
                  + s.getName()
                  + " of type "
                  + s.getBackendStateType()
                  + "; it writes key/value states only");
        }
        if (!states.containsKey(s.getName())) {
          RegisteredKeyValueStateBackendMetaInfo<?, ?> meta =
              new RegisteredKeyValueStateBackendMetaInfo<>(s);
          states.put(s.getName(), new StatedKeyedStateBackend.Registered<>(meta));
          fresh.add(meta);
        }
      }
      taskHandles.add(m.taskHandle());
      for (IncrementalKeyedStateHandle.HandleAndLocalPath f : h.getSharedState()) {
        shared.add(f.getLocalPath());
      }
    }
  }

  /** The initial capacity of a key group's heap timer queue (as Flink's heap backends size it). */
  private static final int QUEUE_CAPACITY = 128;

  /**
   * The daemon's operator name for this backend: Flink's operator identifier reduced to the
   * characters the daemon allows in a path segment, with a random suffix that makes it unique.
   */
  static String operatorName(String flinkOperator) {
    String clean = flinkOperator.replaceAll("[^A-Za-z0-9._-]", "_");
    if (clean.isEmpty() || !Character.isLetterOrDigit(clean.charAt(0))) {
      clean = "op" + clean;
    }
    if (clean.length() > 90) {
      clean = clean.substring(0, 90);
    }
    return clean + "-" + UUID.randomUUID().toString().replace("-", "");
  }

  private void restore(
      Instance inst,
      StateSerializerProvider<K> keyProvider,
      Map<String, StatedKeyedStateBackend.Registered<K>> states,
      Map<String, HeapPriorityQueueSnapshotRestoreWrapper<?>> queues,
      HeapPriorityQueueSetFactory queueFactory,
      Collection<KeyedStateHandle> handles,
      RestoreCacheWarmer warmer)
      throws Exception {
    // Clipped to this task's key groups, as Flink's own assignment does
    // (a handle given whole, e.g. by a test, would fail the reader).
    List<KeyedStateHandle> hs =
        handles == null
            ? List.of()
            : handles.stream()
                .filter(Objects::nonNull)
                .map(h -> h.getIntersection(p.getKeyGroupRange()))
                .filter(Objects::nonNull)
                // Flink's reader does small reads on the raw stream (RestoreStreams says why).
                .map(RestoreStreams::buffered)
                .collect(Collectors.toList());
    if (hs.isEmpty()) {
      return;
    }
    FullSnapshotRestoreOperation<K> op =
        new FullSnapshotRestoreOperation<>(
            p.getKeyGroupRange(),
            p.getEnv().getUserCodeClassLoader().asClassLoader(),
            hs,
            keyProvider);
    int prefixBytes =
        CompositeKeySerializationUtils.computeRequiredBytesInKeyGroupPrefix(
            p.getNumberOfKeyGroups());
    try (ThrowingIterator<SavepointRestoreResult> results = op.restore()) {
      while (results.hasNext()) {
        SavepointRestoreResult result = results.next();
        TypeSerializer<K> keySerializer = keyProvider.previousSchemaSerializer();
        Map<Integer, RegisteredKeyValueStateBackendMetaInfo<?, ?>> byId = new HashMap<>();
        Map<Integer, HeapPriorityQueueSnapshotRestoreWrapper<?>> queuesById = new HashMap<>();
        // Timer queues restored into the daemon: view state id -> queue name.
        Map<Integer, String> daemonQueueIds = new HashMap<>();
        List<String> freshQueues = new ArrayList<>();
        List<RegisteredKeyValueStateBackendMetaInfo<?, ?>> fresh = new ArrayList<>();
        List<StateMetaInfoSnapshot> metas = result.getStateMetaInfoSnapshots();
        for (int i = 0; i < metas.size(); i++) {
          StateMetaInfoSnapshot s = metas.get(i);
          if (s.getBackendStateType() == StateMetaInfoSnapshot.BackendStateType.PRIORITY_QUEUE) {
            if (daemonTimers) {
              if (!daemonQueues.containsKey(s.getName())) {
                daemonQueues.put(s.getName(), new RegisteredPriorityQueueStateBackendMetaInfo<>(s));
                freshQueues.add(s.getName());
              }
              daemonQueueIds.put(i, s.getName());
            } else {
              queuesById.put(i, queue(queues, queueFactory, s));
            }
            continue;
          }
          if (s.getBackendStateType() != StateMetaInfoSnapshot.BackendStateType.KEY_VALUE) {
            // Operator or broadcast state in a keyed handle: its entries
            // fail below, if there are any.
            continue;
          }
          StatedKeyedStateBackend.Registered<K> r = states.get(s.getName());
          if (r == null) {
            RegisteredKeyValueStateBackendMetaInfo<?, ?> m =
                new RegisteredKeyValueStateBackendMetaInfo<>(s);
            r = new StatedKeyedStateBackend.Registered<>(m);
            states.put(s.getName(), r);
            fresh.add(m);
          }
          byId.put(i, r.meta);
          warmer.state(s.getName());
        }
        if (!fresh.isEmpty()) {
          StatedKeyedStateBackend.registerInDaemon(inst, fresh);
        }
        StatedQueues.registerInDaemon(inst, freshQueues);
        try (Loader loader = inst.load();
            ThrowingIterator<KeyGroup> groups = result.getRestoredKeyGroups()) {
          DataOutputSerializer out = new DataOutputSerializer(128);
          while (groups.hasNext()) {
            KeyGroup g = groups.next();
            try (ThrowingIterator<KeyGroupEntry> entries = g.getKeyGroupEntries()) {
              while (entries.hasNext()) {
                KeyGroupEntry e = entries.next();
                HeapPriorityQueueSnapshotRestoreWrapper<?> q = queuesById.get(e.getKvStateId());
                if (q != null) {
                  addElement(q, prefixBytes, e);
                  continue;
                }
                String dq = daemonQueueIds.get(e.getKvStateId());
                if (dq != null) {
                  loader.add(queueEntry(dq, prefixBytes, e));
                  continue;
                }
                RegisteredKeyValueStateBackendMetaInfo<?, ?> m = byId.get(e.getKvStateId());
                if (m == null) {
                  throw new IOException(
                      "the snapshot holds entries of state "
                          + metas.get(e.getKvStateId()).getName()
                          + " of type "
                          + metas.get(e.getKvStateId()).getBackendStateType()
                          + " in a keyed state handle, which the stated backend cannot restore"
                          + " (a keyed handle holds key/value states and priority queues only)");
                }
                ViewEntry ve = entry(m, keySerializer, prefixBytes, e, out);
                loader.add(ve);
                // The bytes the daemon will hold, into the cache as they pass.
                warmer.add(ve);
              }
            }
          }
          loader.finish();
        }
      }
    }
  }

  /**
   * The heap queue a snapshot's priority-queue state restores into: the one an earlier handle of
   * this restore made (a rescale reads several), or a new one with the snapshot's serializer. The
   * timer service's own serializer is checked against it when it asks for the queue ({@link
   * StatedKeyedStateBackend#create}).
   */
  @SuppressWarnings({"unchecked", "rawtypes"})
  private HeapPriorityQueueSnapshotRestoreWrapper<?> queue(
      Map<String, HeapPriorityQueueSnapshotRestoreWrapper<?>> queues,
      HeapPriorityQueueSetFactory factory,
      StateMetaInfoSnapshot s) {
    HeapPriorityQueueSnapshotRestoreWrapper<?> q = queues.get(s.getName());
    if (q != null) {
      return q;
    }
    RegisteredPriorityQueueStateBackendMetaInfo meta =
        new RegisteredPriorityQueueStateBackendMetaInfo(s);
    HeapPriorityQueueSet set = factory.create(s.getName(), meta.getElementSerializer());
    q =
        new HeapPriorityQueueSnapshotRestoreWrapper(
            set,
            meta,
            KeyExtractorFunction.forKeyedObjects(),
            p.getKeyGroupRange(),
            p.getNumberOfKeyGroups());
    queues.put(s.getName(), q);
    return q;
  }

  /**
   * Adds one canonical priority-queue entry to its queue: the key is the key-group prefix and the
   * element in its snapshot serializer; the value is empty.
   */
  @SuppressWarnings({"unchecked", "rawtypes"})
  private static void addElement(
      HeapPriorityQueueSnapshotRestoreWrapper<?> q, int prefixBytes, KeyGroupEntry e)
      throws IOException {
    DataInputDeserializer in = new DataInputDeserializer(e.getKey());
    in.skipBytesToRead(prefixBytes);
    HeapPriorityQueueElement element =
        (HeapPriorityQueueElement) q.getMetaInfo().getElementSerializer().deserialize(in);
    ((HeapPriorityQueueSet) q.getPriorityQueue()).add(element);
  }

  /**
   * One canonical priority-queue entry (the key-group prefix and the element; the value is empty)
   * as the entry of its daemon map state ({@link StatedQueueSet}).
   */
  private static ViewEntry queueEntry(String queue, int prefixBytes, KeyGroupEntry e)
      throws IOException {
    DataInputDeserializer in = new DataInputDeserializer(e.getKey());
    int keyGroup = CompositeKeySerializationUtils.readKeyGroup(prefixBytes, in);
    byte[] element = new byte[in.available()];
    in.readFully(element);
    return ViewEntry.newBuilder()
        .setKeyGroup(keyGroup)
        .setState(queue)
        .setKind(StateKind.STATE_KIND_MAP)
        .setUserKey(ByteString.copyFrom(element))
        .build();
  }

  /** One canonical key/value pair as the daemon entry it was written from. */
  private static <K> ViewEntry entry(
      RegisteredKeyValueStateBackendMetaInfo<?, ?> m,
      TypeSerializer<K> keySerializer,
      int prefixBytes,
      KeyGroupEntry e,
      DataOutputSerializer out)
      throws IOException {
    TypeSerializer<?> ns = m.getPreviousNamespaceSerializer();
    boolean ambiguous = CompositeKeySerializationUtils.isAmbiguousKeyPossible(keySerializer, ns);
    DataInputDeserializer in = new DataInputDeserializer(e.getKey());
    int keyGroup = CompositeKeySerializationUtils.readKeyGroup(prefixBytes, in);
    byte[] key = copyOne(keySerializer, in, out, ambiguous);
    byte[] namespace = copyOne(ns, in, out, ambiguous);
    ViewEntry.Builder b =
        ViewEntry.newBuilder()
            .setKeyGroup(keyGroup)
            .setState(m.getName())
            .setKey(ByteString.copyFrom(key))
            .setNamespace(ByteString.copyFrom(namespace));
    StateDescriptor.Type t = m.getStateType();
    switch (t) {
      case VALUE:
      case REDUCING:
      case AGGREGATING:
        return b.setKind(StateKind.STATE_KIND_VALUE)
            .setValue(ByteString.copyFrom(e.getValue()))
            .build();
      case MAP:
        int rest = in.available();
        byte[] userKey = new byte[rest];
        in.readFully(userKey);
        return b.setKind(StateKind.STATE_KIND_MAP)
            .setUserKey(ByteString.copyFrom(userKey))
            .setValue(ByteString.copyFrom(e.getValue()))
            .build();
      case LIST:
        b.setKind(StateKind.STATE_KIND_LIST);
        TypeSerializer<?> el =
            ((org.apache.flink.api.common.typeutils.base.ListSerializer<?>)
                    m.getPreviousStateSerializer())
                .getElementSerializer();
        DataInputDeserializer vin = new DataInputDeserializer(e.getValue());
        while (vin.available() > 0) {
          out.clear();
          el.copy(vin, out);
          b.addValues(ByteString.copyFrom(out.getCopyOfBuffer()));
          if (vin.available() > 0) {
            byte d = vin.readByte();
            if (d != StatedSnapshotResources.LIST_DELIMITER) {
              throw new IOException(
                  "list state " + m.getName() + ": unexpected byte " + d + " between elements");
            }
          }
        }
        return b.build();
      default:
        throw new IOException("state " + m.getName() + " has type " + t + ", not supported");
    }
  }

  /** Copies one serialized object (and skips its length suffix when keys are ambiguous). */
  private static byte[] copyOne(
      TypeSerializer<?> s, DataInputDeserializer in, DataOutputSerializer out, boolean ambiguous)
      throws IOException {
    out.clear();
    s.copy(in, out);
    byte[] b = out.getCopyOfBuffer();
    if (ambiguous) {
      CompositeKeySerializationUtils.readVariableIntBytes(in, b.length);
    }
    return b;
  }
}
