package io.stated.flink;

import java.util.Collection;
import org.apache.flink.api.common.functions.ReduceFunction;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.runtime.state.internal.InternalReducingState;

/** Reducing state: a value entry, read, reduced and written back in the JVM. */
final class StatedReducingState<K, N, V> extends AbstractStatedState<K, N, V>
    implements InternalReducingState<K, N, V> {
  private final ReduceFunction<V> reduce;

  StatedReducingState(
      StatedKeyedStateBackend<K> backend,
      String name,
      TypeSerializer<N> ns,
      TypeSerializer<V> value,
      ReduceFunction<V> reduce) {
    super(backend, name, ns, value);
    this.reduce = reduce;
  }

  @Override
  public V get() {
    return getInternal();
  }

  @Override
  public V getInternal() {
    byte[] b = getRaw(kg(), key(), ns());
    return b == null ? null : deserialize(valueSerializer, b);
  }

  @Override
  public void updateInternal(V value) {
    if (value == null) {
      clear();
    } else {
      putRaw(kg(), key(), ns(), serialize(valueSerializer, value));
    }
  }

  @Override
  public void add(V value) throws Exception {
    if (value == null) {
      clear();
      return;
    }
    V old = getInternal();
    updateInternal(old == null ? value : reduce.reduce(old, value));
  }

  @Override
  public void mergeNamespaces(N target, Collection<N> sources) throws Exception {
    if (sources == null || sources.isEmpty()) {
      return;
    }
    int keyGroup = kg();
    byte[] key = key();
    V merged = null;
    for (N source : sources) {
      if (source == null) {
        continue;
      }
      byte[] ns = nsBytes(source);
      byte[] b = getRaw(keyGroup, key, ns);
      if (b != null) {
        V v = deserialize(valueSerializer, b);
        merged = merged == null ? v : reduce.reduce(merged, v);
        deleteRaw(keyGroup, key, ns);
      }
    }
    if (merged != null) {
      byte[] tns = nsBytes(target);
      byte[] t = getRaw(keyGroup, key, tns);
      if (t != null) {
        merged = reduce.reduce(merged, deserialize(valueSerializer, t));
      }
      putRaw(keyGroup, key, tns, serialize(valueSerializer, merged));
    }
  }

  @Override
  V readFor(int keyGroup, byte[] key, byte[] ns, TypeSerializer<V> safe) throws Exception {
    byte[] b = getRaw(keyGroup, key, ns);
    return b == null ? null : safe.deserialize(new DataInputDeserializer(b));
  }
}
