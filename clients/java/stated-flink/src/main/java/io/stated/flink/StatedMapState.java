package io.stated.flink;

import com.google.protobuf.ByteString;
import io.stated.api.v1.MapEntry;
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
 * pages of MAP_ITERATE; an iterator's remove is a MAP_REMOVE.
 */
final class StatedMapState<K, N, UK, UV> extends AbstractStatedState<K, N, Map<UK, UV>>
    implements InternalMapState<K, N, UK, UV> {
  static final int PAGE = 1000;

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
  public UV get(UK userKey) {
    Result r =
        daemon.read(
            daemon
                .op(OpType.OP_TYPE_MAP_GET, name, kg(), key(), ns())
                .setUserKey(ByteString.copyFrom(serialize(map().getKeySerializer(), userKey)))
                .build());
    return r.getFound()
        ? readUserValue(map().getValueSerializer(), r.getValue().toByteArray(), name)
        : null;
  }

  @Override
  public void put(UK userKey, UV value) {
    daemon.write(
        daemon
            .op(OpType.OP_TYPE_MAP_PUT, name, kg(), key(), ns())
            .setUserKey(ByteString.copyFrom(serialize(map().getKeySerializer(), userKey)))
            .setValue(ByteString.copyFrom(userValue(value)))
            .build());
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
    removeRaw(kg(), key(), ns(), serialize(map().getKeySerializer(), userKey));
  }

  private void removeRaw(int keyGroup, byte[] key, byte[] ns, byte[] userKey) {
    daemon.write(
        daemon
            .op(OpType.OP_TYPE_MAP_REMOVE, name, keyGroup, key, ns)
            .setUserKey(ByteString.copyFrom(userKey))
            .build());
  }

  @Override
  public boolean contains(UK userKey) {
    return daemon
        .read(
            daemon
                .op(OpType.OP_TYPE_MAP_CONTAINS, name, kg(), key(), ns())
                .setUserKey(ByteString.copyFrom(serialize(map().getKeySerializer(), userKey)))
                .build())
        .getFound();
  }

  @Override
  public boolean isEmpty() {
    return page(kg(), key(), ns(), ByteString.EMPTY, 1).getEntriesCount() == 0;
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
   * Iterates the map of the current key and namespace, a page at a time. The key, namespace and
   * serializers are captured when the iterator is made, as the heap backend's iterators see the map
   * they were made on.
   */
  private <T> Iterator<T> iterate(Function<Map.Entry<UK, UV>, T> f) {
    final int keyGroup = kg();
    final byte[] key = key();
    final byte[] ns = ns();
    final TypeSerializer<UK> ks = map().getKeySerializer();
    final TypeSerializer<UV> vs = map().getValueSerializer();
    return new Iterator<T>() {
      private List<MapEntry> page;
      private int pos;
      private boolean more = true;
      private ByteString last = ByteString.EMPTY;
      private ByteString current;

      private void fill() {
        while ((page == null || pos >= page.size()) && more) {
          Result r = page(keyGroup, key, ns, last, PAGE);
          page = r.getEntriesList();
          pos = 0;
          more = r.getMore() && !page.isEmpty();
          if (!page.isEmpty()) {
            last = page.get(page.size() - 1).getUserKey();
          }
        }
      }

      @Override
      public boolean hasNext() {
        fill();
        return page != null && pos < page.size();
      }

      @Override
      public T next() {
        if (!hasNext()) {
          throw new NoSuchElementException();
        }
        MapEntry e = page.get(pos++);
        current = e.getUserKey();
        UK uk = deserialize(ks, e.getUserKey().toByteArray());
        UV uv = readUserValue(vs, e.getValue().toByteArray(), name);
        byte[] ukBytes = e.getUserKey().toByteArray();
        Map.Entry<UK, UV> entry =
            new AbstractMap.SimpleEntry<UK, UV>(uk, uv) {
              private static final long serialVersionUID = 1L;

              @Override
              public UV setValue(UV value) {
                UV old = super.setValue(value);
                daemon.write(
                    daemon
                        .op(OpType.OP_TYPE_MAP_PUT, name, keyGroup, key, ns)
                        .setUserKey(ByteString.copyFrom(ukBytes))
                        .setValue(ByteString.copyFrom(userValueOf(vs, value)))
                        .build());
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
        removeRaw(keyGroup, key, ns, current.toByteArray());
        current = null;
      }
    };
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
