package io.stated.flink;

import io.stated.api.v1.Op;
import io.stated.api.v1.OpType;
import io.stated.api.v1.Result;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.core.memory.DataOutputSerializer;
import org.apache.flink.queryablestate.client.state.serialization.KvStateSerializer;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.runtime.state.internal.InternalKvState;
import org.apache.flink.util.Preconditions;

/**
 * The common part of the states: the current namespace and its bytes, the current key's bytes and
 * key group from the backend, and the daemon access through the backend's {@link StateCache} (every
 * write goes to both; a read asks the daemon only on a miss). {@code SV} is the state's stored type
 * (a list, a map, a value or an accumulator).
 */
abstract class AbstractStatedState<K, N, SV> implements InternalKvState<K, N, SV> {
  final StatedKeyedStateBackend<K> backend;
  final Daemon daemon;
  final String name;
  TypeSerializer<N> namespaceSerializer;
  TypeSerializer<SV> valueSerializer;
  private N currentNamespace;
  private byte[] currentNamespaceBytes;

  /** The backend's id of this state for reading ahead ({@link ReadAhead}). */
  int id = ReadAhead.MAX_STATES;

  final DataOutputSerializer out = new DataOutputSerializer(64);
  final DataInputDeserializer in = new DataInputDeserializer();

  AbstractStatedState(
      StatedKeyedStateBackend<K> backend,
      String name,
      TypeSerializer<N> namespaceSerializer,
      TypeSerializer<SV> valueSerializer) {
    this.backend = backend;
    this.daemon = backend.daemon();
    this.name = name;
    this.namespaceSerializer = namespaceSerializer;
    this.valueSerializer = valueSerializer;
  }

  /** Takes the serializers of a descriptor registered again (a restored state's new ones). */
  void updateSerializers(TypeSerializer<N> ns, TypeSerializer<SV> value) {
    this.namespaceSerializer = ns;
    this.valueSerializer = value;
    this.currentNamespace = null;
    this.currentNamespaceBytes = null;
  }

  @Override
  public TypeSerializer<K> getKeySerializer() {
    return backend.getKeySerializer();
  }

  @Override
  public TypeSerializer<N> getNamespaceSerializer() {
    return namespaceSerializer;
  }

  @Override
  public TypeSerializer<SV> getValueSerializer() {
    return valueSerializer;
  }

  @Override
  public void setCurrentNamespace(N namespace) {
    Preconditions.checkNotNull(namespace, "Namespace");
    if (namespace != currentNamespace) {
      currentNamespace = namespace;
      currentNamespaceBytes = null;
    }
  }

  N currentNamespace() {
    return currentNamespace;
  }

  byte[] ns() {
    if (currentNamespaceBytes == null) {
      Preconditions.checkNotNull(currentNamespace, "no namespace set on state " + name);
      currentNamespaceBytes = serialize(namespaceSerializer, currentNamespace);
    }
    return currentNamespaceBytes;
  }

  /** Whether this state's current namespace is the one serialized as {@code ns}. */
  boolean atNamespace(byte[] ns) {
    return currentNamespace != null && java.util.Arrays.equals(ns(), ns);
  }

  byte[] nsBytes(N namespace) {
    return serialize(namespaceSerializer, namespace);
  }

  byte[] key() {
    return backend.currentKeyBytes();
  }

  int kg() {
    return backend.getCurrentKeyGroupIndex();
  }

  <T> byte[] serialize(TypeSerializer<T> s, T v) {
    out.clear();
    try {
      s.serialize(v, out);
    } catch (IOException e) {
      throw new IllegalStateException("cannot serialize for state " + name + ": " + e, e);
    }
    return out.getCopyOfBuffer();
  }

  <T> T deserialize(TypeSerializer<T> s, byte[] b) {
    in.setBuffer(b);
    try {
      return s.deserialize(in);
    } catch (IOException e) {
      throw new IllegalStateException(
          "cannot deserialize a value of state " + name + " read from the stated daemon: " + e, e);
    }
  }

  StateCache cache() {
    return backend.cache();
  }

  /** The cache's node of an absent entry of this state's kind. */
  abstract StateCache.Node emptyNode();

  @Override
  public void clear() {
    byte[] key = key();
    byte[] ns = ns();
    deleteRaw(kg(), key, ns);
    cache().putAbsent(name, key, ns, emptyNode());
  }

  /** The value-kind entry at the current key and namespace, or null: cached, else the daemon's. */
  byte[] getValue() {
    return getValue(kg(), key(), ns());
  }

  byte[] getValue(int keyGroup, byte[] key, byte[] ns) {
    backend.noteRead(id);
    StateCache c = cache();
    StateCache.Node n = c.get(name, key, ns);
    if (n != null) {
      daemon.check();
      return ((StateCache.ValueNode) n).value;
    }
    if (c.knownAbsent(name, key, ns)) {
      daemon.check();
      return null;
    }
    Result r = backend.readMiss(this, getOp(keyGroup, key, ns), keyGroup, key, ns);
    byte[] b = r.getFound() ? r.getValue().toByteArray() : null;
    c.put(name, key, ns, new StateCache.ValueNode(b));
    return b;
  }

  /**
   * The read that fetches this state's whole entry at (key, ns) along with another state's miss
   * ({@link StatedKeyedStateBackend#readMiss}): a value kind's GET here; lists and maps override it
   * with {@link #cacheAhead}.
   */
  Op aheadOp(int keyGroup, byte[] key, byte[] ns) {
    return getOp(keyGroup, key, ns);
  }

  /** Puts the answer to {@link #aheadOp} into the cache, as this state's own read would. */
  void cacheAhead(byte[] key, byte[] ns, Result r) {
    cache()
        .put(
            name,
            key,
            ns,
            new StateCache.ValueNode(r.getFound() ? r.getValue().toByteArray() : null));
  }

  private Op getOp(int keyGroup, byte[] key, byte[] ns) {
    return daemon.op(OpType.OP_TYPE_GET, name, keyGroup, key, ns).build();
  }

  /**
   * The value-kind entries of one key in several namespaces, the ones not cached read in one
   * request (a multi-get).
   */
  List<byte[]> getValues(int keyGroup, byte[] key, List<byte[]> nss) {
    StateCache c = cache();
    List<byte[]> out = new ArrayList<>(nss.size());
    List<Op> ops = new ArrayList<>();
    List<Integer> missing = new ArrayList<>();
    for (int i = 0; i < nss.size(); i++) {
      StateCache.Node n = c.get(name, key, nss.get(i));
      if (n == null && !c.knownAbsent(name, key, nss.get(i))) {
        ops.add(daemon.op(OpType.OP_TYPE_GET, name, keyGroup, key, nss.get(i)).build());
        missing.add(i);
      }
      out.add(n == null ? null : ((StateCache.ValueNode) n).value);
    }
    if (ops.isEmpty()) {
      daemon.check();
      return out;
    }
    List<Result> rs = daemon.readAll(ops);
    for (int j = 0; j < rs.size(); j++) {
      Result r = rs.get(j);
      byte[] b = r.getFound() ? r.getValue().toByteArray() : null;
      int i = missing.get(j);
      out.set(i, b);
      c.put(name, key, nss.get(i), new StateCache.ValueNode(b));
    }
    return out;
  }

  /** Writes a value-kind entry (to the daemon, without waiting, and to the cache). */
  void putValue(int keyGroup, byte[] key, byte[] ns, byte[] value) {
    putRaw(keyGroup, key, ns, value);
    cache().put(name, key, ns, new StateCache.ValueNode(value));
  }

  /** Deletes the entry at an address (in the daemon and the cache). */
  void deleteEntry(int keyGroup, byte[] key, byte[] ns) {
    deleteRaw(keyGroup, key, ns);
    cache().putAbsent(name, key, ns, emptyNode());
  }

  /** The stored value at (key group, key, namespace) for a query from another thread, or null. */
  abstract SV readFor(int keyGroup, byte[] key, byte[] ns, TypeSerializer<SV> safeValueSerializer)
      throws Exception;

  @Override
  public byte[] getSerializedValue(
      byte[] serializedKeyAndNamespace,
      TypeSerializer<K> safeKeySerializer,
      TypeSerializer<N> safeNamespaceSerializer,
      TypeSerializer<SV> safeValueSerializer)
      throws Exception {
    Tuple2<K, N> kn =
        KvStateSerializer.deserializeKeyAndNamespace(
            serializedKeyAndNamespace, safeKeySerializer, safeNamespaceSerializer);
    int keyGroup = KeyGroupRangeAssignment.assignToKeyGroup(kn.f0, backend.getNumberOfKeyGroups());
    DataOutputSerializer o = new DataOutputSerializer(32);
    safeKeySerializer.serialize(kn.f0, o);
    byte[] k = o.getCopyOfBuffer();
    o.clear();
    safeNamespaceSerializer.serialize(kn.f1, o);
    byte[] n = o.getCopyOfBuffer();
    SV v = readFor(keyGroup, k, n, safeValueSerializer);
    if (v == null) {
      return null;
    }
    return serializeForQuery(v, safeValueSerializer);
  }

  /** The queryable-state form of a stored value, as the heap backend writes it. */
  byte[] serializeForQuery(SV v, TypeSerializer<SV> safe) throws Exception {
    return KvStateSerializer.serializeValue(v, safe);
  }

  /** GET of the value state entry at the given address, or null bytes. */
  byte[] getRaw(int keyGroup, byte[] key, byte[] ns) {
    Result r = daemon.read(getOp(keyGroup, key, ns));
    return r.getFound() ? r.getValue().toByteArray() : null;
  }

  void putRaw(int keyGroup, byte[] key, byte[] ns, byte[] value) {
    daemon.write(
        daemon
            .op(OpType.OP_TYPE_PUT, name, keyGroup, key, ns)
            .setValue(com.google.protobuf.ByteString.copyFrom(value))
            .build());
    cache().written(name, key, ns);
  }

  void deleteRaw(int keyGroup, byte[] key, byte[] ns) {
    daemon.write(daemon.op(OpType.OP_TYPE_DELETE, name, keyGroup, key, ns).build());
  }

  @Override
  public StateIncrementalVisitor<K, N, SV> getStateIncrementalVisitor(
      int recommendedMaxNumberOfReturnedRecords) {
    // Only the heap backend's incremental TTL cleanup visits entries; the
    // daemon's own TTL is the place for that.
    throw new UnsupportedOperationException(
        "the stated backend does not support incremental TTL cleanup of state " + name);
  }
}
