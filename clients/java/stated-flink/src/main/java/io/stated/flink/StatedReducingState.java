package io.stated.flink;

import org.apache.flink.api.common.functions.ReduceFunction;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.runtime.state.internal.InternalReducingState;

/** Reducing state: a value entry, read, reduced and written back in the JVM. */
final class StatedReducingState<K, N, V> extends AbstractStatedMergingState<K, N, V>
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
  V merge(V a, V b) throws Exception {
    return reduce.reduce(a, b);
  }

  @Override
  public V get() {
    return getInternal();
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
}
