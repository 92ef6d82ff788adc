package io.stated.flink;

import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.runtime.state.internal.InternalAggregatingState;

/** Aggregating state: the accumulator as a value entry, updated in the JVM. */
final class StatedAggregatingState<K, N, IN, ACC, OUT> extends AbstractStatedMergingState<K, N, ACC>
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
  ACC merge(ACC a, ACC b) {
    return fn.merge(a, b);
  }

  @Override
  public OUT get() {
    ACC acc = getInternal();
    return acc == null ? null : fn.getResult(acc);
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
}
