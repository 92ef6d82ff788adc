package io.stated.flink;

import com.google.protobuf.ByteString;
import io.stated.api.v1.MapEntry;
import io.stated.api.v1.Op;
import io.stated.api.v1.OpType;
import io.stated.api.v1.Result;
import java.io.IOException;
import java.util.AbstractMap;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.function.Function;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.base.MapSerializer;
import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.core.memory.DataOutputSerializer;
import org.apache.flink.runtime.state.internal.InternalMapState;

/**
 * Map state on the daemon's map state. A user value is stored as Flink's canonical snapshot writes
 * it (a null flag, then the value), so a snapshot passes it through unchanged. Iteration reads
 * pages of MAP_ITERATE; an iterator's remove is a MAP_REMOVE. The cache keeps, per key and
 * namespace, the user entries read or written (absences too) and knows the whole map after a clear
 * or in a complete state, when point reads and iteration need no daemon.
 */
final class StatedMapState<K, N, UK, UV> extends AbstractStatedState<K, N, Map<UK, UV>>
    implements InternalMapState<K, N, UK, UV> {
  static final int PAGE = 1000;

  /**
   * Entries of a map read along with another state's miss: enough for the small per-key maps that
   * operators read with their other states, without pulling a large map into the cache whole.
   */
  static final int AHEAD_ENTRIES = 64;

  StatedMapState(
      StatedKeyedStateBackend<K> backend,
      String name,
      TypeSerializer<N> ns,
      TypeSerializer<Map<UK, UV>> value) {
    super(backend, name, ns, value);
  }

  @SuppressWarnings("unchecked")
  private MapSerializer<UK, UV> map() {
    return (MapSerializer<UK, UV>) valueSerializer;
  }

  byte[] userValue(UV v) {
    out.clear();
    try {
      out.writeBoolean(v == null);
      if (v != null) {
        map().getValueSerializer().serialize(v, out);
      }
    } catch (IOException e) {
      throw new IllegalStateException("cannot serialize a value of state " + name, e);
    }
    return out.getCopyOfBuffer();
  }

  static <V> V readUserValue(TypeSerializer<V> s, byte[] b, String name) {
    DataInputDeserializer in = new DataInputDeserializer(b);
    try {
      return in.readBoolean() ? null : s.deserialize(in);
    } catch (IOException e) {
      throw new IllegalStateException("cannot deserialize a value of state " + name, e);
    }
  }

  @Override
  StateCache.Node emptyNode() {
    return new StateCache.MapNode(true);
  }

  private byte[] userKeyBytes(UK userKey) {
    return serialize(map().getKeySerializer(), userKey);
  }

  /**
   * A user key's stored value bytes (with the null flag) or {@link StateCache#ABSENT}: cached, else
   * the daemon's (MAP_GET), which the cache then keeps, an absence too.
   */
  private byte[] lookup(int keyGroup, byte[] key, byte[] ns, byte[] userKey) {
    backend.noteRead(id);
    StateCache c = cache();
    StateCache.MapNode n = (StateCache.MapNode) c.get(name, key, ns);
    if (n != null) {
      byte[] v = n.lookup(userKey);
      if (v != null) {
        daemon.check();
        return v;
      }
    } else if (c.knownAbsent(name, key, ns)) {
      daemon.check();
      return StateCache.ABSENT;
    }
    Result r =
        backend.readMiss(
            this,
            daemon
                .op(OpType.OP_TYPE_MAP_GET, name, keyGroup, key, ns)
                .setUserKey(ByteString.copyFrom(userKey))
                .build(),
            keyGroup,
            key,
            ns);
    byte[] v = r.getFound() ? r.getValue().toByteArray() : StateCache.ABSENT;
    remember(keyGroup, key, ns, userKey, v, false);
    return v;
  }

  /** The first page of the map, {@link #AHEAD_ENTRIES} entries at most. */
  @Override
  Op aheadOp(int keyGroup, byte[] key, byte[] ns) {
    return daemon
        .op(OpType.OP_TYPE_MAP_ITERATE, name, keyGroup, key, ns)
        .setUserKey(ByteString.EMPTY)
        .setLimit(AHEAD_ENTRIES)
        .build();
  }

  /** The map's entries, known whole when the page held all of them. */
  @Override
  void cacheAhead(byte[] key, byte[] ns, Result r) {
    StateCache.MapNode n = new StateCache.MapNode(!r.getMore());
    for (MapEntry e : r.getEntriesList()) {
      n.set(e.getUserKey().toByteArray(), e.getValue().toByteArray());
    }
    cache().put(name, key, ns, n);
  }

  /**
   * Records a user key's value bytes or {@link StateCache#ABSENT} in the cache; {@code wasEmpty}:
   * the map was known to have no entry before this write, so a new node holds all of it.
   */
  private void remember(
      int keyGroup, byte[] key, byte[] ns, byte[] userKey, byte[] v, boolean wasEmpty) {
    StateCache c = cache();
    StateCache.MapNode n = (StateCache.MapNode) c.peek(name, key, ns);
    if (n != null) {
      n.set(userKey, v);
      if (n.whole && n.entries.isEmpty() && c.complete(name)) {
        // An empty map of a complete state: its absence says as much.
        c.putAbsent(name, key, ns, n);
      } else {
        c.resized(n);
      }
    } else if (c.enabled() && !(v == StateCache.ABSENT && c.complete(name))) {
      n = new StateCache.MapNode(wasEmpty || c.complete(name));
      n.set(userKey, v);
      c.put(name, key, ns, n);
    }
  }

  @Override
  public UV get(UK userKey) {
    byte[] v = lookup(kg(), key(), ns(), userKeyBytes(userKey));
    return v == StateCache.ABSENT ? null : readUserValue(map().getValueSerializer(), v, name);
  }

  @Override
  public void put(UK userKey, UV value) {
    putRaw(kg(), key(), ns(), userKeyBytes(userKey), userValue(value));
  }

  private void putRaw(int keyGroup, byte[] key, byte[] ns, byte[] userKey, byte[] value) {
    daemon.write(
        daemon
            .op(OpType.OP_TYPE_MAP_PUT, name, keyGroup, key, ns)
            .setUserKey(ByteString.copyFrom(userKey))
            .setValue(ByteString.copyFrom(value))
            .build());
    StateCache c = cache();
    // Asked before the put is recorded: had the map no entry at all?
    boolean wasEmpty = c.peek(name, key, ns) == null && c.knownAbsent(name, key, ns);
    c.written(name, key, ns);
    remember(keyGroup, key, ns, userKey, value, wasEmpty);
  }

  @Override
  public void putAll(Map<UK, UV> map) {
    if (map == null) {
      return;
    }
    for (Map.Entry<UK, UV> e : map.entrySet()) {
      put(e.getKey(), e.getValue());
    }
  }

  @Override
  public void remove(UK userKey) {
    removeRaw(kg(), key(), ns(), userKeyBytes(userKey));
  }

  private void removeRaw(int keyGroup, byte[] key, byte[] ns, byte[] userKey) {
    daemon.write(
        daemon
            .op(OpType.OP_TYPE_MAP_REMOVE, name, keyGroup, key, ns)
            .setUserKey(ByteString.copyFrom(userKey))
            .build());
    remember(keyGroup, key, ns, userKey, StateCache.ABSENT, false);
  }

  @Override
  public boolean contains(UK userKey) {
    return lookup(kg(), key(), ns(), userKeyBytes(userKey)) != StateCache.ABSENT;
  }

  @Override
  public boolean isEmpty() {
    byte[] key = key();
    byte[] ns = ns();
    StateCache c = cache();
    StateCache.MapNode n = (StateCache.MapNode) c.get(name, key, ns);
    if (n != null ? n.anyPresent() || n.whole : c.knownAbsent(name, key, ns)) {
      daemon.check();
      return n == null || !n.anyPresent();
    }
    return page(kg(), key, ns, ByteString.EMPTY, 1).getEntriesCount() == 0;
  }

  private Result page(int keyGroup, byte[] key, byte[] ns, ByteString after, int limit) {
    return daemon.read(
        daemon
            .op(OpType.OP_TYPE_MAP_ITERATE, name, keyGroup, key, ns)
            .setUserKey(after)
            .setLimit(limit)
            .build());
  }

  @Override
  public Iterable<Map.Entry<UK, UV>> entries() {
    return () -> iterate(e -> e);
  }

  @Override
  public Iterable<UK> keys() {
    return () -> iterate(Map.Entry::getKey);
  }

  @Override
  public Iterable<UV> values() {
    return () -> iterate(Map.Entry::getValue);
  }

  @Override
  public Iterator<Map.Entry<UK, UV>> iterator() {
    return iterate(e -> e);
  }

  /**
   * Iterates the map of the current key and namespace: from the cache when it holds the whole map
   * (in the daemon's order, by user key bytes), else a page of MAP_ITERATE at a time. The key,
   * namespace and serializers are captured when the iterator is made, as the heap backend's
   * iterators see the map they were made on.
   */
  private <T> Iterator<T> iterate(Function<Map.Entry<UK, UV>, T> f) {
    backend.noteRead(id);
    final int keyGroup = kg();
    final byte[] key = key();
    final byte[] ns = ns();
    StateCache c = cache();
    StateCache.MapNode n = (StateCache.MapNode) c.get(name, key, ns);
    if (n != null ? n.whole : c.knownAbsent(name, key, ns)) {
      daemon.check();
      List<Map.Entry<byte[], byte[]>> entries = n == null ? List.of() : n.sorted();
      return new EntryIterator<T>(keyGroup, key, ns, f) {
        private int pos;

        @Override
        Map.Entry<byte[], byte[]> fetch() {
          return pos < entries.size() ? entries.get(pos++) : null;
        }
      };
    }
    return new EntryIterator<T>(keyGroup, key, ns, f) {
      private List<MapEntry> page;
      private int pos;
      private boolean more = true;
      private ByteString last = ByteString.EMPTY;

      @Override
      Map.Entry<byte[], byte[]> fetch() {
        while ((page == null || pos >= page.size()) && more) {
          boolean first = page == null;
          Result r = page(keyGroup, key, ns, last, PAGE);
          page = r.getEntriesList();
          pos = 0;
          more = r.getMore() && !page.isEmpty();
          if (first && !more) {
            // The whole map in one answer, which follows every write: the
            // cache may know it whole from now on.
            StateCache.MapNode whole = new StateCache.MapNode(true);
            for (MapEntry e : page) {
              whole.set(e.getUserKey().toByteArray(), e.getValue().toByteArray());
            }
            c.put(name, key, ns, whole);
          }
          if (!page.isEmpty()) {
            last = page.get(page.size() - 1).getUserKey();
          }
        }
        if (page == null || pos >= page.size()) {
          return null;
        }
        MapEntry e = page.get(pos++);
        return Map.entry(e.getUserKey().toByteArray(), e.getValue().toByteArray());
      }
    };
  }

  /**
   * An iterator over user entries as stored bytes, whatever their source; an entry's setValue and
   * the iterator's remove write to the daemon and the cache.
   */
  private abstract class EntryIterator<T> implements Iterator<T> {
    private final int keyGroup;
    private final byte[] key;
    private final byte[] ns;
    private final Function<Map.Entry<UK, UV>, T> f;
    private final TypeSerializer<UK> ks = map().getKeySerializer();
    private final TypeSerializer<UV> vs = map().getValueSerializer();
    private Map.Entry<byte[], byte[]> next;
    private byte[] current;

    EntryIterator(int keyGroup, byte[] key, byte[] ns, Function<Map.Entry<UK, UV>, T> f) {
      this.keyGroup = keyGroup;
      this.key = key;
      this.ns = ns;
      this.f = f;
    }

    /** The next stored entry (user key bytes, value bytes), or null at the end. */
    abstract Map.Entry<byte[], byte[]> fetch();

    @Override
    public boolean hasNext() {
      if (next == null) {
        next = fetch();
      }
      return next != null;
    }

    @Override
    public T next() {
      if (!hasNext()) {
        throw new NoSuchElementException();
      }
      Map.Entry<byte[], byte[]> e = next;
      next = null;
      byte[] ukBytes = e.getKey();
      current = ukBytes;
      UK uk = deserialize(ks, ukBytes);
      UV uv = readUserValue(vs, e.getValue(), name);
      Map.Entry<UK, UV> entry =
          new AbstractMap.SimpleEntry<UK, UV>(uk, uv) {
            private static final long serialVersionUID = 1L;

            @Override
            public UV setValue(UV value) {
              UV old = super.setValue(value);
              putRaw(keyGroup, key, ns, ukBytes, userValueOf(vs, value));
              return old;
            }
          };
      return f.apply(entry);
    }

    @Override
    public void remove() {
      if (current == null) {
        throw new IllegalStateException("remove() without next()");
      }
      removeRaw(keyGroup, key, ns, current);
      current = null;
    }
  }

  private static <V> byte[] userValueOf(TypeSerializer<V> s, V v) {
    DataOutputSerializer o = new DataOutputSerializer(32);
    try {
      o.writeBoolean(v == null);
      if (v != null) {
        s.serialize(v, o);
      }
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
    return o.getCopyOfBuffer();
  }

  @Override
  byte[] serializeForQuery(Map<UK, UV> v, TypeSerializer<Map<UK, UV>> safe) throws Exception {
    MapSerializer<UK, UV> ms = (MapSerializer<UK, UV>) safe;
    return org.apache.flink.queryablestate.client.state.serialization.KvStateSerializer
        .serializeMap(v.entrySet(), ms.getKeySerializer(), ms.getValueSerializer());
  }

  @Override
  Map<UK, UV> readFor(int keyGroup, byte[] key, byte[] ns, TypeSerializer<Map<UK, UV>> safe)
      throws Exception {
    @SuppressWarnings("unchecked")
    MapSerializer<UK, UV> ms = (MapSerializer<UK, UV>) safe;
    Map<UK, UV> out = new HashMap<>();
    ByteString after = ByteString.EMPTY;
    while (true) {
      Result r = page(keyGroup, key, ns, after, PAGE);
      for (MapEntry e : r.getEntriesList()) {
        out.put(
            ms.getKeySerializer()
                .deserialize(new DataInputDeserializer(e.getUserKey().toByteArray())),
            readUserValue(ms.getValueSerializer(), e.getValue().toByteArray(), name));
        after = e.getUserKey();
      }
      if (!r.getMore() || r.getEntriesCount() == 0) {
        break;
      }
    }
    return out.isEmpty() ? null : out;
  }
}
