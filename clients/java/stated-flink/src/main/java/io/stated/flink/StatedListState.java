package io.stated.flink;

import com.google.protobuf.ByteString;
import io.stated.api.v1.Op;
import io.stated.api.v1.OpType;
import io.stated.api.v1.Result;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.base.ListSerializer;
import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.runtime.state.internal.InternalListState;
import org.apache.flink.util.Preconditions;

/**
 * List state on the daemon's list state: each element serialized on its own, appended with
 * LIST_APPEND (no read), replaced with DELETE then LIST_APPEND in order.
 */
final class StatedListState<K, N, V> extends AbstractStatedState<K, N, List<V>>
    implements InternalListState<K, N, V> {

  StatedListState(
      StatedKeyedStateBackend<K> backend,
      String name,
      TypeSerializer<N> ns,
      TypeSerializer<List<V>> value) {
    super(backend, name, ns, value);
  }

  @SuppressWarnings("unchecked")
  private TypeSerializer<V> elements() {
    return ((ListSerializer<V>) valueSerializer).getElementSerializer();
  }

  private List<V> read(int keyGroup, byte[] key, byte[] ns, TypeSerializer<V> el) {
    Result r = daemon.read(daemon.op(OpType.OP_TYPE_LIST_GET, name, keyGroup, key, ns).build());
    if (r.getValuesCount() == 0) {
      return null;
    }
    List<V> out = new ArrayList<>(r.getValuesCount());
    for (ByteString b : r.getValuesList()) {
      out.add(deserialize(el, b.toByteArray()));
    }
    return out;
  }

  @Override
  public Iterable<V> get() {
    return getInternal();
  }

  @Override
  public List<V> getInternal() {
    return read(kg(), key(), ns(), elements());
  }

  @Override
  public void add(V value) {
    Preconditions.checkNotNull(value, "You cannot add null to a ListState.");
    daemon.write(
        daemon
            .op(OpType.OP_TYPE_LIST_APPEND, name, kg(), key(), ns())
            .addValues(ByteString.copyFrom(serialize(elements(), value)))
            .build());
  }

  private Op.Builder append(int keyGroup, byte[] key, byte[] ns, Collection<V> values) {
    Op.Builder op = daemon.op(OpType.OP_TYPE_LIST_APPEND, name, keyGroup, key, ns);
    TypeSerializer<V> el = elements();
    for (V v : values) {
      Preconditions.checkNotNull(v, "You cannot add null to a ListState.");
      op.addValues(ByteString.copyFrom(serialize(el, v)));
    }
    return op;
  }

  @Override
  public void addAll(List<V> values) {
    Preconditions.checkNotNull(values, "List of values to add cannot be null.");
    if (values.isEmpty()) {
      return;
    }
    Op op = append(kg(), key(), ns(), values).build();
    daemon.write(op);
  }

  @Override
  public void update(List<V> values) {
    Preconditions.checkNotNull(values, "List of values to add cannot be null.");
    Op op = append(kg(), key(), ns(), values).build();
    clear();
    if (!values.isEmpty()) {
      daemon.write(op);
    }
  }

  @Override
  public void updateInternal(List<V> values) {
    update(values);
  }

  @Override
  public void mergeNamespaces(N target, Collection<N> sources) {
    if (sources == null || sources.isEmpty()) {
      return;
    }
    int keyGroup = kg();
    byte[] key = key();
    TypeSerializer<V> el = elements();
    List<V> merged = new ArrayList<>();
    for (N source : sources) {
      if (source == null) {
        continue;
      }
      byte[] ns = nsBytes(source);
      List<V> part = read(keyGroup, key, ns, el);
      if (part != null) {
        merged.addAll(part);
        deleteRaw(keyGroup, key, ns);
      }
    }
    if (!merged.isEmpty()) {
      daemon.write(append(keyGroup, key, nsBytes(target), merged).build());
    }
  }

  @Override
  byte[] serializeForQuery(List<V> v, TypeSerializer<List<V>> safe) throws Exception {
    // As RocksDB and the heap backend answer: elements joined by one ','.
    TypeSerializer<V> el = ((ListSerializer<V>) safe).getElementSerializer();
    org.apache.flink.core.memory.DataOutputSerializer o =
        new org.apache.flink.core.memory.DataOutputSerializer(64);
    for (int i = 0; i < v.size(); i++) {
      el.serialize(v.get(i), o);
      if (i < v.size() - 1) {
        o.writeByte(',');
      }
    }
    return o.getCopyOfBuffer();
  }

  @Override
  List<V> readFor(int keyGroup, byte[] key, byte[] ns, TypeSerializer<List<V>> safe)
      throws Exception {
    @SuppressWarnings("unchecked")
    TypeSerializer<V> el = ((ListSerializer<V>) safe).getElementSerializer();
    Result r = daemon.read(daemon.op(OpType.OP_TYPE_LIST_GET, name, keyGroup, key, ns).build());
    if (r.getValuesCount() == 0) {
      return null;
    }
    List<V> out = new ArrayList<>();
    for (ByteString b : r.getValuesList()) {
      out.add(el.deserialize(new DataInputDeserializer(b.toByteArray())));
    }
    return out;
  }
}
