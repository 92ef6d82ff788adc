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
 * LIST_APPEND (no read), replaced with DELETE then LIST_APPEND in order. The cache keeps a list's
 * element bytes once read or known.
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

  @Override
  StateCache.Node emptyNode() {
    return new StateCache.ListNode(List.of());
  }

  /** The list's serialized elements, or null for no list: cached, else the daemon's. */
  private List<byte[]> elementBytes(int keyGroup, byte[] key, byte[] ns) {
    backend.noteRead(id);
    StateCache c = cache();
    StateCache.Node n = c.get(name, key, ns);
    if (n != null) {
      daemon.check();
      List<byte[]> els = ((StateCache.ListNode) n).elements;
      return els.isEmpty() ? null : els;
    }
    if (c.knownAbsent(name, key, ns)) {
      daemon.check();
      return null;
    }
    Result r = backend.readMiss(this, aheadOp(keyGroup, key, ns), keyGroup, key, ns);
    List<byte[]> els = elements(r);
    c.put(name, key, ns, new StateCache.ListNode(els));
    return els.isEmpty() ? null : els;
  }

  @Override
  Op aheadOp(int keyGroup, byte[] key, byte[] ns) {
    return daemon.op(OpType.OP_TYPE_LIST_GET, name, keyGroup, key, ns).build();
  }

  @Override
  void cacheAhead(byte[] key, byte[] ns, Result r) {
    cache().put(name, key, ns, new StateCache.ListNode(elements(r)));
  }

  private static List<byte[]> elements(Result r) {
    List<byte[]> els = new ArrayList<>(r.getValuesCount());
    for (ByteString b : r.getValuesList()) {
      els.add(b.toByteArray());
    }
    return els;
  }

  private List<V> read(int keyGroup, byte[] key, byte[] ns, TypeSerializer<V> el) {
    List<byte[]> els = elementBytes(keyGroup, key, ns);
    if (els == null) {
      return null;
    }
    List<V> out = new ArrayList<>(els.size());
    for (byte[] b : els) {
      out.add(deserialize(el, b));
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
    appendAll(kg(), key(), ns(), List.of(serialize(elements(), value)));
  }

  /** Serializes values (none may be null) into element bytes. */
  private List<byte[]> serializeAll(Collection<V> values) {
    TypeSerializer<V> el = elements();
    List<byte[]> out = new ArrayList<>(values.size());
    for (V v : values) {
      Preconditions.checkNotNull(v, "You cannot add null to a ListState.");
      out.add(serialize(el, v));
    }
    return out;
  }

  /**
   * Appends elements with one LIST_APPEND, without reading; the cached list, if any, grows with
   * them (a complete state's absent list becomes them).
   */
  private void appendAll(int keyGroup, byte[] key, byte[] ns, List<byte[]> els) {
    if (els.isEmpty()) {
      return;
    }
    Op.Builder op = daemon.op(OpType.OP_TYPE_LIST_APPEND, name, keyGroup, key, ns);
    for (byte[] b : els) {
      op.addValues(ByteString.copyFrom(b));
    }
    daemon.write(op.build());
    StateCache c = cache();
    StateCache.Node n = c.peek(name, key, ns);
    // Asked before the append is recorded: was there no list at all?
    boolean wasAbsent = n == null && c.knownAbsent(name, key, ns);
    c.written(name, key, ns);
    if (n != null) {
      StateCache.ListNode l = (StateCache.ListNode) n;
      for (byte[] b : els) {
        l.add(b);
      }
      c.resized(l);
    } else if (wasAbsent) {
      c.put(name, key, ns, new StateCache.ListNode(els));
    }
  }

  @Override
  public void addAll(List<V> values) {
    Preconditions.checkNotNull(values, "List of values to add cannot be null.");
    if (values.isEmpty()) {
      return;
    }
    appendAll(kg(), key(), ns(), serializeAll(values));
  }

  @Override
  public void update(List<V> values) {
    Preconditions.checkNotNull(values, "List of values to add cannot be null.");
    List<byte[]> els = serializeAll(values);
    byte[] key = key();
    byte[] ns = ns();
    int keyGroup = kg();
    deleteEntry(keyGroup, key, ns);
    appendAll(keyGroup, key, ns, els);
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
    List<byte[]> merged = new ArrayList<>();
    for (N source : sources) {
      if (source == null) {
        continue;
      }
      byte[] ns = nsBytes(source);
      List<byte[]> part = elementBytes(keyGroup, key, ns);
      if (part != null) {
        merged.addAll(part);
        deleteEntry(keyGroup, key, ns);
      }
    }
    appendAll(keyGroup, key, nsBytes(target), merged);
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
