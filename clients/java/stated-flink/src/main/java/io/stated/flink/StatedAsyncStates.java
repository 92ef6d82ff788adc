package io.stated.flink;

import com.google.protobuf.ByteString;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.ReduceFunction;
import org.apache.flink.api.common.state.v2.StateFuture;
import org.apache.flink.api.common.state.v2.StateIterator;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.core.memory.DataOutputSerializer;
import org.apache.flink.core.state.StateFutureUtils;
import org.apache.flink.runtime.asyncprocessing.AbstractStateIterator;
import org.apache.flink.runtime.asyncprocessing.StateRequestHandler;
import org.apache.flink.runtime.asyncprocessing.StateRequestType;
import org.apache.flink.runtime.state.v2.AbstractAggregatingState;
import org.apache.flink.runtime.state.v2.AbstractListState;
import org.apache.flink.runtime.state.v2.AbstractMapState;
import org.apache.flink.runtime.state.v2.AbstractReducingState;
import org.apache.flink.runtime.state.v2.AbstractValueState;

/**
 * The State V2 states of {@link StatedAsyncKeyedStateBackend}. Each is Flink's own request-issuing
 * state (its calls become {@link org.apache.flink.runtime.asyncprocessing.StateRequest}s that the
 * {@link StatedAsyncStateExecutor} turns into daemon operations) plus what the executor needs to
 * address the daemon: the daemon state's name and the namespace's bytes. Values are stored exactly
 * as the synchronous states store them, so both share snapshots and restores.
 */
final class StatedAsyncStates {
  private StatedAsyncStates() {}

  /** What the executor needs of a state. Used on the task thread only. */
  interface Addressed {
    /** The daemon state's (and Flink state's) name. */
    String stateName();

    /** The namespace's bytes; null means the state's default namespace. */
    byte[] namespaceBytes(Object namespace);

    /**
     * Whether the executor's filter of new keys ({@link WrittenFilter}) records this state's writes
     * and may answer its reads: fixed when the state is made, so that the executor asks the state
     * object it touches anyway rather than a set of names per request.
     */
    boolean newKeysFiltered();
  }

  /**
   * Serializes namespaces on the task thread, caching the last one; and holds what every state
   * object of one registration shares: whether the filter of new keys tracks the state.
   */
  static final class Namespaces<N> {
    private final String name;
    private final TypeSerializer<N> serializer;
    private final N defaultNamespace;
    final boolean newKeysFiltered;
    private final DataOutputSerializer out = new DataOutputSerializer(32);
    private Object last;
    private byte[] lastBytes;

    Namespaces(
        String name, TypeSerializer<N> serializer, N defaultNamespace, boolean newKeysFiltered) {
      this.name = name;
      this.newKeysFiltered = newKeysFiltered;
      this.serializer = serializer.duplicate();
      this.defaultNamespace = defaultNamespace;
    }

    @SuppressWarnings("unchecked")
    byte[] bytes(Object namespace) {
      Object ns = namespace == null ? defaultNamespace : namespace;
      if (ns == last && lastBytes != null) {
        return lastBytes;
      }
      out.clear();
      try {
        serializer.serialize((N) ns, out);
      } catch (IOException e) {
        throw new IllegalStateException(
            "cannot serialize namespace " + ns + " of state " + name + ": " + e, e);
      }
      last = ns;
      lastBytes = out.getCopyOfBuffer();
      return lastBytes;
    }
  }

  static final class Value<K, N, V> extends AbstractValueState<K, N, V> implements Addressed {
    private final Namespaces<N> ns;

    Value(StateRequestHandler h, String name, TypeSerializer<V> vs, Namespaces<N> ns) {
      super(h, vs);
      this.ns = ns;
      this.name = name;
    }

    private final String name;

    @Override
    public String stateName() {
      return name;
    }

    @Override
    public byte[] namespaceBytes(Object namespace) {
      return ns.bytes(namespace);
    }

    @Override
    public boolean newKeysFiltered() {
      return ns.newKeysFiltered;
    }
  }

  static final class Reducing<K, N, V> extends AbstractReducingState<K, N, V> implements Addressed {
    private final Namespaces<N> ns;
    private final String name;

    Reducing(
        StateRequestHandler h,
        String name,
        ReduceFunction<V> f,
        TypeSerializer<V> vs,
        Namespaces<N> ns) {
      super(h, f, vs);
      this.ns = ns;
      this.name = name;
    }

    @Override
    public String stateName() {
      return name;
    }

    @Override
    public byte[] namespaceBytes(Object namespace) {
      return ns.bytes(namespace);
    }

    @Override
    public boolean newKeysFiltered() {
      return ns.newKeysFiltered;
    }
  }

  static final class Aggregating<K, N, IN, ACC, OUT>
      extends AbstractAggregatingState<K, N, IN, ACC, OUT> implements Addressed {
    private final Namespaces<N> ns;
    private final String name;

    Aggregating(
        StateRequestHandler h,
        String name,
        AggregateFunction<IN, ACC, OUT> f,
        TypeSerializer<ACC> vs,
        Namespaces<N> ns) {
      super(h, f, vs);
      this.ns = ns;
      this.name = name;
    }

    @Override
    public String stateName() {
      return name;
    }

    @Override
    public byte[] namespaceBytes(Object namespace) {
      return ns.bytes(namespace);
    }

    @Override
    public boolean newKeysFiltered() {
      return ns.newKeysFiltered;
    }
  }

  /**
   * A list read whole (LIST_GET answers every element at once). An {@link AbstractStateIterator}
   * with nothing more to load, as the synchronous {@code get()} reads only such iterators.
   */
  static final class WholeList<T> extends AbstractStateIterator<T> {
    final List<T> items;

    WholeList(
        org.apache.flink.api.common.state.v2.State state, StateRequestHandler h, List<T> items) {
      super(state, StateRequestType.LIST_GET, h, items);
      this.items = items;
    }

    @Override
    public boolean hasNextLoading() {
      return false;
    }

    @Override
    protected Object nextPayloadForContinuousLoading() {
      return null;
    }
  }

  /**
   * List state. Flink's base class leaves merging namespaces out (window merging needs it): the
   * sources are read, cleared and appended to the target, in that order on the stream.
   */
  static final class ListS<K, N, V> extends AbstractListState<K, N, V> implements Addressed {
    private final Namespaces<N> ns;
    private final String name;

    ListS(StateRequestHandler h, String name, TypeSerializer<V> element, Namespaces<N> ns) {
      super(h, element);
      this.ns = ns;
      this.name = name;
    }

    @Override
    public String stateName() {
      return name;
    }

    @Override
    public byte[] namespaceBytes(Object namespace) {
      return ns.bytes(namespace);
    }

    @Override
    public boolean newKeysFiltered() {
      return ns.newKeysFiltered;
    }

    @Override
    public StateFuture<Void> asyncMergeNamespaces(N target, Collection<N> sources) {
      if (sources == null || sources.isEmpty()) {
        return StateFutureUtils.completedVoidFuture();
      }
      List<N> from = new ArrayList<>();
      List<StateFuture<StateIterator<V>>> reads = new ArrayList<>();
      for (N s : sources) {
        if (s != null && !s.equals(target)) {
          from.add(s);
          setCurrentNamespace(s);
          reads.add(asyncGet());
        }
      }
      return StateFutureUtils.combineAll(reads)
          .thenCompose(
              lists -> {
                List<V> all = new ArrayList<>();
                List<StateFuture<Void>> writes = new ArrayList<>();
                int i = 0;
                for (StateIterator<V> it : lists) {
                  List<V> items = ((WholeList<V>) it).items;
                  if (!items.isEmpty()) {
                    all.addAll(items);
                    setCurrentNamespace(from.get(i));
                    writes.add(asyncClear());
                  }
                  i++;
                }
                if (!all.isEmpty()) {
                  setCurrentNamespace(target);
                  writes.add(asyncAddAll(all));
                }
                return StateFutureUtils.combineAll(writes).thenAccept(x -> {});
              });
    }

    @Override
    public void mergeNamespaces(N target, Collection<N> sources) {
      if (sources == null || sources.isEmpty()) {
        return;
      }
      List<V> all = new ArrayList<>();
      for (N s : sources) {
        if (s != null && !s.equals(target)) {
          setCurrentNamespace(s);
          List<V> items = new ArrayList<>();
          get().forEach(items::add);
          if (!items.isEmpty()) {
            all.addAll(items);
            clear();
          }
        }
      }
      if (!all.isEmpty()) {
        setCurrentNamespace(target);
        addAll(all);
      }
    }
  }

  static final class MapS<K, N, UK, UV> extends AbstractMapState<K, N, UK, UV>
      implements Addressed {
    private final Namespaces<N> ns;
    private final String name;
    private final TypeSerializer<UK> userKeys;

    MapS(
        StateRequestHandler h,
        String name,
        TypeSerializer<UK> userKeys,
        TypeSerializer<UV> values,
        Namespaces<N> ns) {
      super(h, values);
      this.ns = ns;
      this.name = name;
      this.userKeys = userKeys;
    }

    /** The user key serializer; thread-confined copies are made by the caller. */
    TypeSerializer<UK> userKeySerializer() {
      return userKeys;
    }

    @Override
    public String stateName() {
      return name;
    }

    @Override
    public byte[] namespaceBytes(Object namespace) {
      return ns.bytes(namespace);
    }

    @Override
    public boolean newKeysFiltered() {
      return ns.newKeysFiltered;
    }
  }

  /** Where a map iteration goes on: the map's address and the last user key read. */
  static final class MapCursor {
    final StateRequestType type;
    final int keyGroup;
    final byte[] key;
    final byte[] namespace;
    final ByteString after;

    MapCursor(StateRequestType type, int keyGroup, byte[] key, byte[] namespace, ByteString after) {
      this.type = type;
      this.keyGroup = keyGroup;
      this.key = key;
      this.namespace = namespace;
      this.after = after;
    }
  }

  /**
   * One page of a map's entries, keys or values; Flink asks for the next page with an
   * ITERATOR_LOADING request whose payload is the cursor.
   */
  static final class MapPage<T> extends AbstractStateIterator<T> {
    private final MapCursor next;

    MapPage(
        MapS<?, ?, ?, ?> state,
        StateRequestType type,
        StateRequestHandler handler,
        List<T> items,
        MapCursor next) {
      super(state, type, handler, items);
      this.next = next;
    }

    @Override
    public boolean hasNextLoading() {
      return next != null;
    }

    @Override
    protected Object nextPayloadForContinuousLoading() {
      return next;
    }
  }
}
