package io.stated.flink;

import com.google.protobuf.ByteString;
import io.stated.api.v1.ViewEntry;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * Puts a restore's entries into the task's {@link StateCache} as they pass on their way to the
 * daemon, so that the first reads after a restore (a failover's catch-up, the timers that fire at
 * the end of input) hit the cache instead of each making a round trip. The cache's bound holds as
 * always: once it is full, the least recently restored entries make room, so a state larger than
 * the cache leaves its last entries there.
 *
 * <p>A restored state is marked complete when the restore first meets it (the daemon's instance is
 * fresh, so it holds nothing but what the restore loads and this cache sees) and stays complete
 * only while no entry of it is evicted, which the cache checks as it evicts: a state whose entries
 * all fit answers its misses as absences, as a fresh job's does.
 *
 * <p>A map state's entries are one per user key. A map's node is made whole (it knows every user
 * key of its key and namespace) when the restore meets the map for the first time in its key group
 * (all of a key's entries are in its key group): the node then takes every entry of the map that
 * follows, as long as it stays in the cache. A map met again after its node was evicted gets a node
 * that is not whole (its earlier entries are only in the daemon). Writers of Flink's canonical
 * format put one map's entries one after the other, so that is rare, but nothing here depends on
 * it. The maps met are remembered per key group, at most {@link #MAX_MAPS_IN_GROUP} (and no more
 * than the cache could hold); past that, the key group's further maps are not cached and their
 * states are no longer complete.
 *
 * <p>Used by the restore on its one thread, before the backend exists.
 */
final class RestoreCacheWarmer {
  /** The most maps of one key group remembered (see the class comment). */
  static final long MAX_MAPS_IN_GROUP = 1 << 16;

  private final StateCache cache;
  private final Set<String> seenStates = new HashSet<>();
  private final Set<StateCache.Address> mapsInGroup = new HashSet<>();
  private final long maxMapsInGroup;
  private int keyGroup = -1;
  private boolean mapsOverflowed;

  RestoreCacheWarmer(StateCache cache) {
    this.cache = cache;
    // Transient memory beside the cache's bound: a few MiB at most.
    this.maxMapsInGroup =
        Math.max(1, Math.min(MAX_MAPS_IN_GROUP, cache.capacity() / StateCache.ENTRY_OVERHEAD));
  }

  /**
   * Called for each key/value state a restored snapshot lists, before its entries: the first time a
   * state is met it is complete (nothing of it is in the daemon yet).
   */
  void state(String name) {
    if (cache.enabled() && seenStates.add(name)) {
      cache.markComplete(name);
    }
  }

  /** Puts one restored entry (as the daemon will hold it) into the cache. */
  void add(ViewEntry e) {
    if (!cache.enabled()) {
      return;
    }
    if (e.getKeyGroup() != keyGroup) {
      keyGroup = e.getKeyGroup();
      mapsInGroup.clear();
      mapsOverflowed = false;
    }
    String state = e.getState();
    byte[] key = e.getKey().toByteArray();
    byte[] ns = e.getNamespace().toByteArray();
    // The daemon will hold this address, whatever the cache keeps of it.
    cache.written(state, key, ns);
    switch (e.getKind()) {
      case STATE_KIND_VALUE:
        cache.put(state, key, ns, new StateCache.ValueNode(e.getValue().toByteArray()));
        return;
      case STATE_KIND_LIST:
        List<byte[]> els = new ArrayList<>(e.getValuesCount());
        for (ByteString b : e.getValuesList()) {
          els.add(b.toByteArray());
        }
        cache.put(state, key, ns, new StateCache.ListNode(els));
        return;
      case STATE_KIND_MAP:
        addMapEntry(state, key, ns, e.getUserKey().toByteArray(), e.getValue().toByteArray());
        return;
      default:
        // Not a kind the backend loads; the cache leaves the state alone
        // (the load itself fails on it).
        cache.remove(state, key, ns);
    }
  }

  private void addMapEntry(String state, byte[] key, byte[] ns, byte[] userKey, byte[] value) {
    StateCache.MapNode n = (StateCache.MapNode) cache.peek(state, key, ns);
    if (n != null) {
      n.set(userKey, value);
      cache.resized(n);
      return;
    }
    StateCache.Address a = new StateCache.Address(state, key, ns);
    boolean first;
    if (mapsOverflowed) {
      first = false;
    } else if (mapsInGroup.size() >= maxMapsInGroup && !mapsInGroup.contains(a)) {
      // More maps in this key group than the cache could hold: stop
      // telling first sightings from returns, and cache no more of them.
      mapsOverflowed = true;
      first = false;
    } else {
      first = mapsInGroup.add(a);
    }
    if (!first) {
      // This map's earlier entries (if any) left the cache: what a node
      // would hold now is only part of the map.
      cache.remove(state, key, ns);
      if (mapsOverflowed) {
        return;
      }
      n = new StateCache.MapNode(false);
    } else {
      n = new StateCache.MapNode(true);
    }
    n.set(userKey, value);
    cache.put(state, key, ns, n);
  }
}
