package io.stated.flink;

import java.util.Collection;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.runtime.state.internal.InternalAggregatingState;

/** Aggregating state: the accumulator as a value entry, updated in the JVM. */
final class StatedAggregatingState<K, N, IN, ACC, OUT> extends AbstractStatedState<K, N, ACC>
    implements InternalAggregatingState<K, N, IN, ACC, OUT> {
  private final AggregateFunction<IN, ACC, OUT> fn;

  StatedAggregatingState(
      StatedKeyedStateBackend<K> backend,
      String name,
      TypeSerializer<N> ns,
      TypeSerializer<ACC> acc,
      AggregateFunction<IN, ACC, OUT> fn) {
    super(backend, name, ns, acc);
    this.fn = fn;
  }

  @Override
  public OUT get() {
    ACC acc = getInternal();
    return acc == null ? null : fn.getResult(acc);
  }

  @Override
  public ACC getInternal() {
    byte[] b = getRaw(kg(), key(), ns());
    return b == null ? null : deserialize(valueSerializer, b);
  }

  @Override
  public void updateInternal(ACC acc) {
    if (acc == null) {
      clear();
    } else {
      putRaw(kg(), key(), ns(), serialize(valueSerializer, acc));
    }
  }

  @Override
  public void add(IN value) {
    if (value == null) {
      clear();
      return;
    }
    ACC acc = getInternal();
    if (acc == null) {
      acc = fn.createAccumulator();
    }
    updateInternal(fn.add(value, acc));
  }

  @Override
  public void mergeNamespaces(N target, Collection<N> sources) {
    if (sources == null || sources.isEmpty()) {
      return;
    }
    int keyGroup = kg();
    byte[] key = key();
    ACC merged = null;
    for (N source : sources) {
      if (source == null) {
        continue;
      }
      byte[] ns = nsBytes(source);
      byte[] b = getRaw(keyGroup, key, ns);
      if (b != null) {
        ACC v = deserialize(valueSerializer, b);
        merged = merged == null ? v : fn.merge(merged, v);
        deleteRaw(keyGroup, key, ns);
      }
    }
    if (merged != null) {
      byte[] tns = nsBytes(target);
      byte[] t = getRaw(keyGroup, key, tns);
      if (t != null) {
        merged = fn.merge(merged, deserialize(valueSerializer, t));
      }
      putRaw(keyGroup, key, tns, serialize(valueSerializer, merged));
    }
  }

  @Override
  ACC readFor(int keyGroup, byte[] key, byte[] ns, TypeSerializer<ACC> safe) throws Exception {
    byte[] b = getRaw(keyGroup, key, ns);
    return b == null ? null : safe.deserialize(new DataInputDeserializer(b));
  }
}
