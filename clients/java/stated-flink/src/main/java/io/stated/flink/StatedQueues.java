package io.stated.flink;

import io.stated.api.v1.Op;
import io.stated.api.v1.Result;
import io.stated.api.v1.StateKind;
import io.stated.client.Instance;
import io.stated.client.StatedException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import javax.annotation.Nullable;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.TypeSerializerSchemaCompatibility;
import org.apache.flink.runtime.state.KeyExtractorFunction;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyGroupedInternalPriorityQueue;
import org.apache.flink.runtime.state.Keyed;
import org.apache.flink.runtime.state.PriorityComparable;
import org.apache.flink.runtime.state.PriorityComparator;
import org.apache.flink.runtime.state.RegisteredPriorityQueueStateBackendMetaInfo;
import org.apache.flink.runtime.state.heap.HeapPriorityQueueElement;
import org.apache.flink.runtime.state.heap.KeyGroupPartitionedPriorityQueue;
import org.apache.flink.runtime.state.metainfo.StateMetaInfoSnapshot;
import org.apache.flink.util.FlinkRuntimeException;
import org.apache.flink.util.StateMigrationException;

/**
 * The priority queues (timers) of a backend whose timer service is {@code daemon} ({@link
 * StatedOptions#TIMER_SERVICE}): each is a daemon map state of the queue's name, one {@link
 * StatedQueueSet} per key group, and Flink's {@link KeyGroupPartitionedPriorityQueue} over them.
 *
 * <p>The queues are then part of every snapshot as the daemon's other states are: stated's
 * incremental checkpoints carry them in their files, canonical snapshots write them as Flink's
 * {@code PRIORITY_QUEUE} states (the key-group prefix and the element, an empty value), and a
 * restore hands them back to the daemon, so the timer service neither writes every timer into each
 * checkpoint nor reads them all back.
 */
final class StatedQueues {
  /** A queue's meta info and, once the timer service asked for it, the queue. */
  private static final class Entry {
    RegisteredPriorityQueueStateBackendMetaInfo<?> meta;
    KeyGroupedInternalPriorityQueue<?> queue;

    /** Restored: the daemon may hold elements, which the sets read when first used. */
    final boolean restored;

    Entry(RegisteredPriorityQueueStateBackendMetaInfo<?> meta, boolean restored) {
      this.meta = meta;
      this.restored = restored;
    }
  }

  private final Daemon daemon;
  @Nullable private final StatedQueueSet.Polled polled;
  private final KeyGroupRange keyGroups;
  private final int numberOfKeyGroups;
  private final Map<String, Entry> queues = new LinkedHashMap<>();

  StatedQueues(
      Daemon daemon,
      KeyGroupRange keyGroups,
      int numberOfKeyGroups,
      Collection<RegisteredPriorityQueueStateBackendMetaInfo<?>> restored,
      @Nullable StatedQueueSet.Polled polled) {
    this.daemon = daemon;
    this.polled = polled;
    this.keyGroups = keyGroups;
    this.numberOfKeyGroups = numberOfKeyGroups;
    for (RegisteredPriorityQueueStateBackendMetaInfo<?> m : restored) {
      queues.put(m.getName(), new Entry(m, true));
    }
  }

  /** Whether {@code name} is a queue's daemon state. */
  boolean contains(String name) {
    return queues.containsKey(name);
  }

  /** Whether the backend has no queue (made or restored). */
  boolean isEmpty() {
    return queues.isEmpty();
  }

  /** The queues' meta info for a snapshot, in registration order. */
  List<StateMetaInfoSnapshot> snapshots() {
    List<StateMetaInfoSnapshot> out = new ArrayList<>(queues.size());
    for (Entry e : queues.values()) {
      out.add(e.meta.snapshot());
    }
    return out;
  }

  /** The meta info snapshot of queue {@code name} (which must exist). */
  StateMetaInfoSnapshot snapshot(String name) {
    return queues.get(name).meta.snapshot();
  }

  /** Registers queues' daemon states (map states of their names). */
  static void registerInDaemon(Instance inst, Collection<String> names) {
    if (names.isEmpty()) {
      return;
    }
    List<io.stated.api.v1.StateDescriptor> ds = new ArrayList<>();
    for (String n : names) {
      ds.add(
          io.stated.api.v1.StateDescriptor.newBuilder()
              .setName(n)
              .setKind(StateKind.STATE_KIND_MAP)
              .build());
    }
    inst.flush();
    StatedException.await(inst.registerStates(ds));
  }

  /**
   * The queue {@code name}: the one made before (Flink's timer service asks once per queue), a
   * restored one (its serializer checked against the new one), or a new, empty one. Elements are
   * stored as bytes of the serializer they were written with, so the new serializer must read them
   * as they are: one that needs a migration is refused, as an incompatible one.
   */
  @SuppressWarnings({"unchecked", "rawtypes"})
  <T extends HeapPriorityQueueElement & PriorityComparable<? super T> & Keyed<?>>
      KeyGroupedInternalPriorityQueue<T> create(
          String name, TypeSerializer<T> serializer, boolean allowFutureMetadataUpdates) {
    Entry e = queues.get(name);
    if (e != null && e.queue != null) {
      return (KeyGroupedInternalPriorityQueue<T>) e.queue;
    }
    RegisteredPriorityQueueStateBackendMetaInfo<T> fresh =
        new RegisteredPriorityQueueStateBackendMetaInfo<>(name, serializer);
    if (allowFutureMetadataUpdates) {
      fresh = fresh.withSerializerUpgradesAllowed();
    }
    if (e != null) {
      RegisteredPriorityQueueStateBackendMetaInfo<T> meta =
          (RegisteredPriorityQueueStateBackendMetaInfo<T>) e.meta;
      TypeSerializerSchemaCompatibility<T> c = meta.updateElementSerializer(serializer);
      if (c.isIncompatible() || c.isCompatibleAfterMigration()) {
        throw new FlinkRuntimeException(
            new StateMigrationException(
                "the new serializer of priority queue "
                    + name
                    + " ("
                    + serializer
                    + ") must read the elements the old one wrote: the stated backend keeps"
                    + " them as serialized bytes and cannot migrate them ("
                    + (c.isIncompatible() ? "incompatible" : "compatible after migration")
                    + ")"));
      }
      // The new serializer reads the stored bytes as they are, so it
      // describes them from now on (as Flink's heap backend does).
      e.meta = fresh;
    } else {
      e = new Entry(fresh, false);
      registerInDaemon(daemon.instance(), List.of(name));
      queues.put(name, e);
    }
    TypeSerializer<T> s = serializer.duplicate();
    List<StatedQueueSet<T>> sets = new ArrayList<>(keyGroups.getNumberOfKeyGroups());
    for (int kg = keyGroups.getStartKeyGroup(); kg <= keyGroups.getEndKeyGroup(); kg++) {
      sets.add(new StatedQueueSet<>(daemon, name, kg, s, !e.restored, polled));
    }
    if (e.restored) {
      prefetch(sets);
    }
    int first = keyGroups.getStartKeyGroup();
    KeyGroupPartitionedPriorityQueue.PartitionQueueSetFactory<T, StatedQueueSet<T>> factory =
        (kg, numKeyGroups, keyExtractor, comparator) -> sets.get(kg - first);
    KeyGroupPartitionedPriorityQueue<T, StatedQueueSet<T>> q =
        new KeyGroupPartitionedPriorityQueue<>(
            KeyExtractorFunction.<T>forKeyedObjects(),
            PriorityComparator.<T>forPriorityComparableObjects(),
            factory,
            keyGroups,
            numberOfKeyGroups);
    e.queue = q;
    return q;
  }

  /**
   * Fills the heads of a restored queue's key groups in one round trip: building the partitioned
   * queue peeks at every key group, which would otherwise read the daemon once per key group.
   */
  private <T> void prefetch(List<StatedQueueSet<T>> sets) {
    List<Op> ops = new ArrayList<>(sets.size());
    for (StatedQueueSet<T> s : sets) {
      ops.add(s.refillOp());
    }
    List<Result> rs = daemon.readAll(ops);
    for (int i = 0; i < sets.size(); i++) {
      sets.get(i).refilled(rs.get(i));
    }
  }
}
