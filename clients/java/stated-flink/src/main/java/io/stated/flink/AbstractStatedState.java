package io.stated.flink;

import io.stated.api.v1.OpType;
import io.stated.api.v1.Result;
import java.io.IOException;
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
 * key group from the backend, and the daemon access. {@code SV} is the state's stored type (a list,
 * a map, a value or an accumulator).
 */
abstract class AbstractStatedState<K, N, SV> implements InternalKvState<K, N, SV> {
  final StatedKeyedStateBackend<K> backend;
  final Daemon daemon;
  final String name;
  TypeSerializer<N> namespaceSerializer;
  TypeSerializer<SV> valueSerializer;
  private N currentNamespace;
  private byte[] currentNamespaceBytes;
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

  @Override
  public void clear() {
    daemon.write(daemon.op(OpType.OP_TYPE_DELETE, name, kg(), key(), ns()).build());
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
    Result r = daemon.read(daemon.op(OpType.OP_TYPE_GET, name, keyGroup, key, ns).build());
    return r.getFound() ? r.getValue().toByteArray() : null;
  }

  void putRaw(int keyGroup, byte[] key, byte[] ns, byte[] value) {
    daemon.write(
        daemon
            .op(OpType.OP_TYPE_PUT, name, keyGroup, key, ns)
            .setValue(com.google.protobuf.ByteString.copyFrom(value))
            .build());
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
