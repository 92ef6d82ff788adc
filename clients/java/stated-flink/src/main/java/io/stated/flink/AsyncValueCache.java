package io.stated.flink;

import com.google.protobuf.ByteString;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The asynchronous backend's write-back cache of its value-like states (value, reducing,
 * aggregating), bounded by bytes, least recently used first out: a get of a cached address is
 * answered without a daemon operation, and a write is stored here, dirty, and reaches the daemon
 * only when its entry is evicted or the executor flushes (before a snapshot's barrier, before a
 * state is registered again). A hot key written many times between two checkpoints costs the daemon
 * one put.
 *
 * <p>It is coherent for the reason the synchronous backend's cache is: the task is the only writer
 * of its instance, and every write is stored here in Flink's order on the task thread, so the cache
 * never holds a value older than the daemon's. A dirty entry is the newest value of its address;
 * the executor sends a dirty entry it evicts in its batch before any later request, so a later get
 * that misses reads it from the daemon. Entries are the daemon's bytes, so each answer deserializes
 * a fresh copy.
 *
 * <p>What the synchronous cache does not need: a get that misses is answered later, on the client's
 * response thread, and by then the task may have written the address again. So a miss takes a
 * ticket, every write withdraws the address's ticket, and an answer fills the cache only while its
 * ticket is still the address's: an answer older than a write never overwrites it. The methods are
 * synchronized for that (task thread and response thread). A fill never evicts a dirty entry (the
 * response thread cannot send it in order); the task thread's next {@link #evict} does.
 *
 * <p>Capacity 0 switches the cache off: lookups miss, nothing is stored, every write is sent.
 */
final class AsyncValueCache {
  /**
   * Bytes counted for an entry besides its key, namespace and value: the address and entry objects,
   * the LRU map's node and the byte strings' headers. On the high side for a 64-bit JVM.
   */
  static final long ENTRY_OVERHEAD = 160;

  /** A cached absence: the daemon holds nothing at the address (not a value of zero bytes). */
  private static final Object ABSENT = new Object();

  /**
   * The state, key group, key and namespace a value lives at, as one array: a lookup in a large
   * cache misses the CPU caches at every object it follows, so the address has two (itself and the
   * array) rather than one per part. Its hash mixes every byte ({@link ByteHash} says why).
   */
  static final class Address {
    private final String state;

    /** Key group (4 bytes), key length (4 bytes), key, namespace. */
    private final byte[] id;

    private final int hash;

    Address(String state, int keyGroup, ByteString key, ByteString namespace) {
      this(state, keyGroup, key.toByteArray(), namespace.toByteArray());
    }

    Address(String state, int keyGroup, byte[] key, byte[] namespace) {
      this.state = state;
      byte[] b = new byte[8 + key.length + namespace.length];
      putInt(b, 0, keyGroup);
      putInt(b, 4, key.length);
      System.arraycopy(key, 0, b, 8, key.length);
      System.arraycopy(namespace, 0, b, 8 + key.length, namespace.length);
      this.id = b;
      this.hash = ByteHash.finish(ByteHash.add(ByteHash.seed(state), b, 0, b.length));
    }

    private static void putInt(byte[] b, int at, int v) {
      b[at] = (byte) (v >>> 24);
      b[at + 1] = (byte) (v >>> 16);
      b[at + 2] = (byte) (v >>> 8);
      b[at + 3] = (byte) v;
    }

    String state() {
      return state;
    }

    int keyGroup() {
      return getInt(id, 0);
    }

    byte[] key() {
      return Arrays.copyOfRange(id, 8, 8 + getInt(id, 4));
    }

    byte[] namespace() {
      return Arrays.copyOfRange(id, 8 + getInt(id, 4), id.length);
    }

    private static int getInt(byte[] b, int at) {
      return (b[at] & 0xFF) << 24
          | (b[at + 1] & 0xFF) << 16
          | (b[at + 2] & 0xFF) << 8
          | (b[at + 3] & 0xFF);
    }

    long bytes() {
      return id.length + 2L * state.length();
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
      return hash == a.hash && Arrays.equals(id, a.id) && state.equals(a.state);
    }

    @Override
    public String toString() {
      return state + "/" + HexFormat.of().formatHex(id);
    }
  }

  /** The answer of {@link #lookup}: a hit with its value (null: absent), or a miss's ticket. */
  static final class Lookup {
    final boolean hit;
    final ByteString value;
    final Object ticket;

    private Lookup(boolean hit, ByteString value, Object ticket) {
      this.hit = hit;
      this.value = value;
      this.ticket = ticket;
    }
  }

  /** A dirty entry taken for the daemon: its address and value (null: delete it). */
  record WriteBack(Address address, ByteString value) {}

  private final long capacity;
  private long bytes;
  private long hits;
  private long misses;

  /** Address to its value's bytes or {@link #ABSENT}. */
  private final LinkedHashMap<Address, Object> lru = new LinkedHashMap<>(1024, 0.75f, true);

  private final Map<Address, Object> tickets = new HashMap<>();

  /** The entries written since they were last sent: the daemon does not have their values yet. */
  private final Set<Address> dirty = new HashSet<>();

  AsyncValueCache(long capacity) {
    if (capacity < 0) {
      throw new IllegalArgumentException("cache capacity must be >= 0 bytes, got " + capacity);
    }
    this.capacity = capacity;
  }

  boolean enabled() {
    return capacity > 0;
  }

  /**
   * Drops every entry and pending fill of {@code state}: the backend registered it again, and a
   * migration may have rewritten its values in the daemon in a new serializer's format.
   */
  synchronized void invalidate(String state) {
    for (Address a : dirty) {
      if (a.state().equals(state)) {
        throw new IllegalStateException(
            "state " + state + " has writes not sent to the daemon; flush before invalidating");
      }
    }
    Iterator<Map.Entry<Address, Object>> it = lru.entrySet().iterator();
    while (it.hasNext()) {
      Map.Entry<Address, Object> e = it.next();
      if (e.getKey().state().equals(state)) {
        bytes -= size(e.getKey(), e.getValue());
        it.remove();
      }
    }
    tickets.keySet().removeIf(a -> a.state().equals(state));
  }

  /** The cached value of {@code a}, or a miss whose ticket {@link #fill} needs. */
  synchronized Lookup lookup(Address a) {
    Object v = capacity == 0 ? null : lru.get(a);
    if (v != null) {
      hits++;
      return new Lookup(true, v == ABSENT ? null : (ByteString) v, null);
    }
    misses++;
    if (capacity == 0) {
      return new Lookup(false, null, null);
    }
    Object ticket = new Object();
    tickets.put(a, ticket);
    return new Lookup(false, null, ticket);
  }

  /**
   * The task wrote {@code value} (null: deleted) at {@code a}: stored as dirty, any pending fill
   * dropped. False when it is not stored (the cache is off, or the entry alone is over its
   * capacity): the caller sends the write, and the address is no longer cached. The cache may now
   * be over its capacity until {@link #evict}.
   */
  synchronized boolean write(Address a, ByteString value) {
    if (capacity == 0) {
      return false;
    }
    if (!tickets.isEmpty()) {
      tickets.remove(a);
    }
    if (!store(a, value, false)) {
      dirty.remove(a);
      return false;
    }
    dirty.add(a);
    return true;
  }

  /**
   * Evicts least recently used entries until the cache is within its capacity; the dirty ones
   * evicted are added to {@code sendNow}, which the caller sends before any later request. On the
   * task thread, after each request.
   */
  synchronized void evict(List<WriteBack> sendNow) {
    Iterator<Map.Entry<Address, Object>> it = lru.entrySet().iterator();
    while (bytes > capacity && it.hasNext()) {
      Map.Entry<Address, Object> e = it.next();
      if (dirty.remove(e.getKey())) {
        sendNow.add(writeBack(e.getKey(), e.getValue()));
      }
      bytes -= size(e.getKey(), e.getValue());
      it.remove();
    }
  }

  /** The dirty entries (all, or those of {@code state} when not null), clean from now on. */
  synchronized List<WriteBack> takeDirty(String state) {
    List<WriteBack> l = new ArrayList<>();
    Iterator<Address> it = dirty.iterator();
    while (it.hasNext()) {
      Address a = it.next();
      if (state == null || a.state().equals(state)) {
        l.add(writeBack(a, lru.get(a)));
        it.remove();
      }
    }
    return l;
  }

  private static WriteBack writeBack(Address a, Object v) {
    return new WriteBack(a, v == ABSENT ? null : (ByteString) v);
  }

  /**
   * The daemon's answer to the get that took {@code ticket}: stored unless the task wrote {@code a}
   * since (or another get took a newer ticket, whose answer will fill it instead). A get that
   * failed leaves its ticket behind until the next write or miss of the address; it fails the task,
   * and the cache with it.
   */
  synchronized void fill(Address a, Object ticket, ByteString value) {
    if (ticket == null || tickets.get(a) != ticket) {
      return;
    }
    tickets.remove(a);
    store(a, value, true);
  }

  private static long size(Address a, Object v) {
    return a.bytes() + (v == ABSENT ? 0 : ((ByteString) v).size()) + ENTRY_OVERHEAD;
  }

  /**
   * Stores {@code value} at {@code a} as the most recently used entry; false when the entry alone
   * is over the capacity (then {@code a} is not cached). {@code evictClean}: evict clean entries,
   * the least recently used first, until within the capacity or at the first dirty one (a fill, on
   * the response thread); otherwise evict nothing ({@link #evict} follows on the task thread).
   */
  private boolean store(Address a, ByteString value, boolean evictClean) {
    Object v = value == null ? ABSENT : value;
    // One lookup: a put of a present address replaces its value and makes
    // it the most recently used.
    Object old = lru.put(a, v);
    if (old != null) {
      bytes -= size(a, old);
    }
    long size = size(a, v);
    if (size > capacity) {
      lru.remove(a);
      return false;
    }
    bytes += size;
    if (evictClean) {
      Iterator<Map.Entry<Address, Object>> it = lru.entrySet().iterator();
      while (bytes > capacity && it.hasNext()) {
        Map.Entry<Address, Object> e = it.next();
        if (dirty.contains(e.getKey())) {
          break;
        }
        bytes -= size(e.getKey(), e.getValue());
        it.remove();
      }
    }
    return true;
  }

  synchronized int dirtyEntries() {
    return dirty.size();
  }

  synchronized long bytes() {
    return bytes;
  }

  synchronized int entries() {
    return lru.size();
  }

  synchronized long hits() {
    return hits;
  }

  synchronized long misses() {
    return misses;
  }
}
