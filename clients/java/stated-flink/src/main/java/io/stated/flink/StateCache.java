package io.stated.flink;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The task's write-through cache of its keyed state, bounded by bytes, least recently used first
 * out.
 *
 * <p>It is coherent because one task is the only writer of its instance: every write goes to the
 * daemon (queued and batched, in order) and to this cache in the same call, so the cache never
 * holds a value the daemon will not have. Entries are the daemon's bytes (not objects), so a read
 * deserializes a fresh copy as RocksDB's reads do, and a snapshot needs nothing from the cache: its
 * view barrier follows every queued write on the stream.
 *
 * <p>An entry is one address (state, key, namespace): a value (or a known absence), a list's
 * elements, or a map's user entries (each a value or a known absence) with a flag that says whether
 * the node holds the whole map. A state is <em>complete</em> while this cache has every entry the
 * daemon holds for it: from its registration in a fresh instance (the daemon holds nothing of it),
 * or from the start of a restore that puts every entry it loads here too ({@link
 * RestoreCacheWarmer}), until the first entry of it is evicted or dropped. A miss on a complete
 * state is an absence, answered without asking the daemon: a fresh job whose state fits never reads
 * from the daemon, nor does a restored one whose state fits.
 *
 * <p>A state stays <em>tracked</em> from the same start (it was complete once) for as long as the
 * cache lives, evictions or not: every address written since then went into a Bloom filter ({@link
 * #written}), so a miss on an address the filter has never seen is an absence too. That spares the
 * round trip of the first read of every new key, which a job whose state outgrows the cache makes
 * once per key; a false positive of the filter only costs the read it would have made anyway.
 * Deletes leave the filter as it is (it may say "maybe" for an absent entry, never "no" for a
 * present one). The filter's bits are counted in the cache's capacity.
 *
 * <p>Used from the task thread only (a queryable-state read from another thread goes to the
 * daemon). Capacity 0 switches the cache off: lookups miss and nothing is stored.
 */
final class StateCache {
  /**
   * Bytes counted for an entry besides its keys and values: the address and node objects, the LRU
   * map's entry and the arrays' headers. An estimate on the high side for a 64-bit JVM with
   * compressed pointers, so that the bound holds for what the heap really keeps.
   */
  static final long ENTRY_OVERHEAD = 160;

  /** Bytes counted per element of a list besides its own bytes (array header, list slot). */
  static final long ELEMENT_OVERHEAD = 64;

  /**
   * Bytes counted per user entry of a map besides its key and value bytes: the hash map's node, the
   * key wrapper and two array headers.
   */
  static final long MAP_ENTRY_OVERHEAD = 96;

  /** Bytes counted for a map node's own hash map. */
  static final long MAP_OVERHEAD = 64;

  /** A map user value known to be absent. */
  static final byte[] ABSENT = new byte[0];

  private final long capacity;
  private final CacheBudget budget;
  private boolean closed;
  private long bytes;
  private final LinkedHashMap<Address, Node> lru = new LinkedHashMap<>(1024, 0.75f, true);
  private final Set<String> complete = new HashSet<>();
  private final Set<String> tracked = new HashSet<>();

  /**
   * Addresses written to the daemon since their state became tracked; null when the cache is off.
   * Sized for one address per {@link #BYTES_PER_FILTERED_ADDRESS} bytes of capacity at {@link
   * #FILTER_BITS_PER_ADDRESS} bits each (under 1% false positives; about 2.3% of the capacity);
   * more addresses than that raise the rate, which costs round trips, never a wrong answer.
   */
  private final BlockedBloomFilter written;

  /** Bits of the filter per address it is sized for. */
  static final int FILTER_BITS_PER_ADDRESS = 12;

  /** Capacity bytes per address the filter is sized for. */
  static final long BYTES_PER_FILTERED_ADDRESS = 64;

  /** Bytes of the capacity the filter's bits take. */
  private final long reserved;

  private long filterAnswers;
  private final Address probe = new Address();
  private long hits;
  private long misses;
  private long evictions;

  StateCache(long capacity) {
    this(new CacheBudget(capacity));
  }

  /**
   * A cache that shares {@code budget} with the other caches of its slot (see {@link CacheBudget}):
   * it holds at most its share of it, the filter's bits included.
   */
  StateCache(CacheBudget budget) {
    this.budget = budget;
    long capacity = budget.capacity();
    this.capacity = capacity;
    if (capacity > 0) {
      long n = Math.max(256, capacity / BYTES_PER_FILTERED_ADDRESS);
      this.written = new BlockedBloomFilter(n, FILTER_BITS_PER_ADDRESS);
      this.reserved = Math.min(capacity / 2, BlockedBloomFilter.bytes(n, FILTER_BITS_PER_ADDRESS));
    } else {
      this.written = null;
      this.reserved = 0;
    }
    budget.join();
  }

  boolean enabled() {
    return capacity > 0;
  }

  long capacity() {
    return capacity;
  }

  /** The bytes counted for what the cache holds now; at most {@link #capacity}. */
  long bytes() {
    return bytes;
  }

  int entries() {
    return lru.size();
  }

  long hits() {
    return hits;
  }

  long misses() {
    return misses;
  }

  long evictions() {
    return evictions;
  }

  /**
   * Read misses answered as absences by the filter of written addresses alone (the state was no
   * longer complete).
   */
  long filterAnswers() {
    return filterAnswers;
  }

  /**
   * Declares that the daemon holds nothing of {@code state} beyond what this cache holds; from now
   * on its writes are tracked (see {@link #written}).
   */
  void markComplete(String state) {
    if (enabled()) {
      complete.add(state);
      tracked.add(state);
    }
  }

  /** Whether a miss on {@code state} means the entry is absent in the daemon. */
  boolean complete(String state) {
    return complete.contains(state);
  }

  /**
   * Records that the entry at an address may exist in the daemon: called for every write that can
   * create an entry (put, append, map put) and for every entry a restore loads, before the cache is
   * asked about that address again.
   */
  void written(String state, byte[] key, byte[] ns) {
    if (written == null || !tracked.contains(state)) {
      return;
    }
    written.add(BlockedBloomFilter.hash(state, key, ns));
  }

  /**
   * Whether the daemon holds no entry at an address, known without asking it: the state is
   * complete, or tracked and the address was never written. Ask after a cache miss.
   */
  boolean knownAbsent(String state, byte[] key, byte[] ns) {
    if (complete.contains(state)) {
      return true;
    }
    if (written == null || !tracked.contains(state)) {
      return false;
    }
    boolean maybe = written.mayContain(BlockedBloomFilter.hash(state, key, ns));
    if (!maybe) {
      filterAnswers++;
    }
    return !maybe;
  }

  /** The node at an address (made the most recently used), or null. */
  Node get(String state, byte[] key, byte[] ns) {
    if (lru.isEmpty()) {
      misses++;
      return null;
    }
    probe.set(state, key, ns);
    Node n = lru.get(probe);
    probe.clear();
    if (n == null) {
      misses++;
    } else {
      hits++;
    }
    return n;
  }

  /**
   * Stores {@code node} at an address, replacing what was there. The key and namespace arrays are
   * kept, not copied: callers pass arrays that nobody changes afterwards.
   */
  void put(String state, byte[] key, byte[] ns, Node node) {
    if (!enabled()) {
      return;
    }
    node.size = node.measure() + ENTRY_OVERHEAD + key.length + ns.length;
    Node old = lru.put(new Address(state, key, ns), node);
    if (old != null) {
      bytes -= old.size;
      old.size = -1;
    }
    bytes += node.size;
    evict();
  }

  /**
   * Records that the entry at an address is absent (deleted or cleared): {@code empty}, the kind's
   * node of an absent entry, is stored, unless the state is complete, where a miss says as much.
   */
  void putAbsent(String state, byte[] key, byte[] ns, Node empty) {
    if (complete.contains(state)) {
      drop(state, key, ns);
    } else {
      put(state, key, ns, empty);
    }
  }

  /** The node at an address without counting a hit or miss (for writes), or null. */
  Node peek(String state, byte[] key, byte[] ns) {
    if (lru.isEmpty()) {
      return null;
    }
    probe.set(state, key, ns);
    Node n = lru.get(probe);
    probe.clear();
    return n;
  }

  /** Drops the node at an address, if any; its state is no longer complete. */
  void remove(String state, byte[] key, byte[] ns) {
    complete.remove(state);
    drop(state, key, ns);
  }

  private void drop(String state, byte[] key, byte[] ns) {
    if (lru.isEmpty()) {
      return;
    }
    probe.set(state, key, ns);
    Node old = lru.remove(probe);
    probe.clear();
    if (old != null) {
      bytes -= old.size;
      old.size = -1;
    }
  }

  /** Called after a cached node changed in place: counts its new size (and may evict it). */
  void resized(Node node) {
    if (node.size < 0) {
      return; // evicted or replaced meanwhile
    }
    long fixed = node.size - node.measuredAt;
    long size = node.measure() + fixed;
    bytes += size - node.size;
    node.size = size;
    evict();
  }

  /** Drops every entry of {@code state} (its stored bytes changed under the cache). */
  void invalidate(String state) {
    complete.remove(state);
    tracked.remove(state);
    for (Iterator<Map.Entry<Address, Node>> it = lru.entrySet().iterator(); it.hasNext(); ) {
      Map.Entry<Address, Node> e = it.next();
      if (e.getKey().state.equals(state)) {
        bytes -= e.getValue().size;
        e.getValue().size = -1;
        it.remove();
      }
    }
  }

  /** Drops everything. */
  void clear() {
    for (Node n : lru.values()) {
      n.size = -1;
    }
    lru.clear();
    complete.clear();
    tracked.clear();
    bytes = 0;
  }

  /** Drops everything and leaves the budget (once): the backend is disposed. */
  void close() {
    clear();
    if (!closed) {
      closed = true;
      budget.leave();
    }
  }

  private void evict() {
    long room = budget.share() - reserved;
    if (bytes <= room) {
      return;
    }
    for (Iterator<Map.Entry<Address, Node>> it = lru.entrySet().iterator();
        bytes > room && it.hasNext(); ) {
      Map.Entry<Address, Node> e = it.next();
      // The daemon holds the entry (write-through); only the knowledge
      // that the cache has all of the state is lost.
      complete.remove(e.getKey().state);
      bytes -= e.getValue().size;
      e.getValue().size = -1;
      it.remove();
      evictions++;
    }
  }

  /** An address: state name, serialized key and namespace. */
  static final class Address {
    private String state;
    private byte[] key;
    private byte[] ns;
    private int hash;

    Address() {}

    Address(String state, byte[] key, byte[] ns) {
      set(state, key, ns);
    }

    void set(String state, byte[] key, byte[] ns) {
      this.state = state;
      this.key = key;
      this.ns = ns;
      this.hash = ByteHash.finish(ByteHash.add(ByteHash.add(ByteHash.seed(state), key), ns));
    }

    void clear() {
      state = null;
      key = null;
      ns = null;
    }

    @Override
    public int hashCode() {
      return hash;
    }

    @Override
    public boolean equals(Object o) {
      if (this == o) {
        return true;
      }
      if (!(o instanceof Address)) {
        return false;
      }
      Address a = (Address) o;
      return hash == a.hash
          && state.equals(a.state)
          && Arrays.equals(key, a.key)
          && Arrays.equals(ns, a.ns);
    }
  }

  /** What the cache holds at one address. */
  abstract static class Node {
    /** Bytes counted for this node in the cache; -1 once it left the cache. */
    long size = -1;

    /** What {@link #measure} said when {@link #size} was last set. */
    long measuredAt;

    /** The bytes of the node's content (without the entry's overhead). */
    abstract long contentBytes();

    final long measure() {
      measuredAt = contentBytes();
      return measuredAt;
    }
  }

  /** A value-kind entry (value, reducing, aggregating state): its bytes, or null for absent. */
  static final class ValueNode extends Node {
    final byte[] value;

    ValueNode(byte[] value) {
      this.value = value;
    }

    @Override
    long contentBytes() {
      return value == null ? 0 : value.length;
    }
  }

  /** A list's elements, each serialized on its own; empty: no list. */
  static final class ListNode extends Node {
    final List<byte[]> elements;
    private long content;

    ListNode(List<byte[]> elements) {
      this.elements = new ArrayList<>(elements);
      for (byte[] b : elements) {
        content += b.length + ELEMENT_OVERHEAD;
      }
    }

    void add(byte[] element) {
      elements.add(element);
      content += element.length + ELEMENT_OVERHEAD;
    }

    @Override
    long contentBytes() {
      return content;
    }
  }

  /**
   * A map's user entries (value bytes with the null flag, as the daemon stores them, or {@link
   * #ABSENT}); {@code whole}: every user key not in {@code entries} is absent too.
   */
  static final class MapNode extends Node {
    final HashMap<Bytes, byte[]> entries = new HashMap<>();
    boolean whole;
    private long content;

    MapNode(boolean whole) {
      this.whole = whole;
    }

    /** Records a user key's value ({@link #ABSENT}: removed). */
    void set(byte[] userKey, byte[] value) {
      Bytes k = new Bytes(userKey);
      if (whole && value == ABSENT) {
        byte[] old = entries.remove(k);
        if (old != null) {
          content -= userKey.length + old.length + MAP_ENTRY_OVERHEAD;
        }
        return;
      }
      byte[] old = entries.put(k, value);
      if (old != null) {
        content -= userKey.length + old.length + MAP_ENTRY_OVERHEAD;
      }
      content += userKey.length + value.length + MAP_ENTRY_OVERHEAD;
    }

    /** The user key's value, {@link #ABSENT}, or null when the node does not know. */
    byte[] lookup(byte[] userKey) {
      byte[] v = entries.get(new Bytes(userKey));
      if (v == null && whole) {
        return ABSENT;
      }
      return v;
    }

    /** Whether some user key is known to be present. */
    boolean anyPresent() {
      for (byte[] v : entries.values()) {
        if (v != ABSENT) {
          return true;
        }
      }
      return false;
    }

    /** The present entries ordered by user key bytes (unsigned), as the daemon iterates them. */
    List<Map.Entry<byte[], byte[]>> sorted() {
      List<Map.Entry<byte[], byte[]>> out = new ArrayList<>(entries.size());
      for (Map.Entry<Bytes, byte[]> e : entries.entrySet()) {
        if (e.getValue() != ABSENT) {
          out.add(Map.entry(e.getKey().b, e.getValue()));
        }
      }
      out.sort((x, y) -> Arrays.compareUnsigned(x.getKey(), y.getKey()));
      return out;
    }

    @Override
    long contentBytes() {
      return MAP_OVERHEAD + content;
    }
  }

  /** A byte array as a hash key. */
  static final class Bytes {
    final byte[] b;
    private final int hash;

    Bytes(byte[] b) {
      this.b = b;
      this.hash = ByteHash.finish(ByteHash.add(0, b));
    }

    @Override
    public int hashCode() {
      return hash;
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof Bytes && hash == ((Bytes) o).hash && Arrays.equals(b, ((Bytes) o).b);
    }
  }
}
