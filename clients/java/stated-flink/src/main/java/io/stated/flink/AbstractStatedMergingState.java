package io.stated.flink;

import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Set;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.core.memory.DataInputDeserializer;

/**
 * Reducing and aggregating state: an accumulator as a value entry, read, combined and written back
 * in the JVM. The subclasses say how two accumulators merge and how an input is added.
 */
abstract class AbstractStatedMergingState<K, N, ACC> extends AbstractStatedState<K, N, ACC> {

  AbstractStatedMergingState(
      StatedKeyedStateBackend<K> backend,
      String name,
      TypeSerializer<N> ns,
      TypeSerializer<ACC> acc) {
    super(backend, name, ns, acc);
  }

  /** Two accumulators as one ({@code a} is the earlier). */
  abstract ACC merge(ACC a, ACC b) throws Exception;

  @Override
  StateCache.Node emptyNode() {
    return new StateCache.ValueNode(null);
  }

  public ACC getInternal() {
    byte[] b = getValue();
    return b == null ? null : deserialize(valueSerializer, b);
  }

  public void updateInternal(ACC acc) {
    if (acc == null) {
      clear();
    } else {
      putValue(kg(), key(), ns(), serialize(valueSerializer, acc));
    }
  }

  /**
   * Merges the sources' accumulators into the target's, deleting the sources, as the heap backend
   * does: a source given twice counts once, and a target among the sources keeps the merge only.
   * The entries not cached are read in one request.
   */
  public void mergeNamespaces(N target, Collection<N> sources) throws Exception {
    if (sources == null || sources.isEmpty()) {
      return;
    }
    int keyGroup = kg();
    byte[] key = key();
    byte[] tns = nsBytes(target);
    Set<StateCache.Bytes> seen = new HashSet<>();
    List<byte[]> nss = new ArrayList<>();
    for (N source : sources) {
      if (source != null) {
        byte[] ns = nsBytes(source);
        if (seen.add(new StateCache.Bytes(ns))) {
          nss.add(ns);
        }
      }
    }
    if (nss.isEmpty()) {
      return;
    }
    boolean targetIsSource = seen.contains(new StateCache.Bytes(tns));
    if (!targetIsSource) {
      nss.add(tns);
    }
    List<byte[]> values = getValues(keyGroup, key, nss);
    int sourceCount = targetIsSource ? nss.size() : nss.size() - 1;
    ACC merged = null;
    for (int i = 0; i < sourceCount; i++) {
      byte[] b = values.get(i);
      if (b != null) {
        ACC v = deserialize(valueSerializer, b);
        merged = merged == null ? v : merge(merged, v);
        deleteEntry(keyGroup, key, nss.get(i));
      }
    }
    if (merged != null) {
      byte[] t = targetIsSource ? null : values.get(nss.size() - 1);
      if (t != null) {
        merged = merge(merged, deserialize(valueSerializer, t));
      }
      putValue(keyGroup, key, tns, serialize(valueSerializer, merged));
    }
  }

  @Override
  ACC readFor(int keyGroup, byte[] key, byte[] ns, TypeSerializer<ACC> safe) throws Exception {
    byte[] b = getRaw(keyGroup, key, ns);
    return b == null ? null : safe.deserialize(new DataInputDeserializer(b));
  }
}
