package io.stated.flink;

import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.runtime.state.internal.InternalValueState;

/** Value state: one PUT/GET/DELETE entry of the daemon's value state per key and namespace. */
final class StatedValueState<K, N, V> extends AbstractStatedState<K, N, V>
    implements InternalValueState<K, N, V>, ValueState<V> {
  private final V defaultValue;

  StatedValueState(
      StatedKeyedStateBackend<K> backend,
      String name,
      TypeSerializer<N> ns,
      TypeSerializer<V> value,
      V defaultValue) {
    super(backend, name, ns, value);
    this.defaultValue = defaultValue;
  }

  @Override
  StateCache.Node emptyNode() {
    return new StateCache.ValueNode(null);
  }

  @Override
  public V value() {
    byte[] b = getValue();
    if (b == null) {
      return defaultValue == null ? null : valueSerializer.copy(defaultValue);
    }
    return deserialize(valueSerializer, b);
  }

  @Override
  public void update(V value) {
    if (value == null) {
      clear();
      return;
    }
    putValue(kg(), key(), ns(), serialize(valueSerializer, value));
  }

  @Override
  V readFor(int keyGroup, byte[] key, byte[] ns, TypeSerializer<V> safe) throws Exception {
    byte[] b = getRaw(keyGroup, key, ns);
    if (b == null) {
      return defaultValue;
    }
    return safe.deserialize(new org.apache.flink.core.memory.DataInputDeserializer(b));
  }
}
