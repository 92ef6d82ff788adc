package io.stated.flink;

import com.google.protobuf.ByteString;
import io.stated.api.v1.ViewEntry;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.base.ListSerializer;
import org.apache.flink.api.common.typeutils.base.MapSerializer;
import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.core.memory.DataOutputSerializer;
import org.apache.flink.runtime.state.RegisteredKeyValueStateBackendMetaInfo;
import org.apache.flink.runtime.state.StateSnapshotTransformer;
import org.apache.flink.runtime.state.StateSnapshotTransformer.StateSnapshotTransformFactory;

/**
 * A state's snapshot transformer (TTL's cleanup in full snapshots) applied to the daemon's entries
 * as a snapshot writes them: the entry is deserialized, transformed as Flink's heap backend
 * transforms its objects, and written again, or dropped when the transformer drops it. Runs on the
 * snapshot's asynchronous thread with serializers of its own.
 */
abstract class EntryTransformer {
  /** The transformed entry, or null to leave it out of the snapshot. */
  abstract ViewEntry apply(ViewEntry e) throws IOException;

  /** The transformer of a state, or null when it has none. */
  @SuppressWarnings({"unchecked", "rawtypes"})
  static EntryTransformer of(
      RegisteredKeyValueStateBackendMetaInfo<?, ?> meta, StateSnapshotTransformFactory<?> f) {
    if (f == null) {
      return null;
    }
    Optional<? extends StateSnapshotTransformer<?>> t = f.createForDeserializedState();
    if (t.isEmpty()) {
      return null;
    }
    TypeSerializer<?> s = meta.getStateSerializer().duplicate();
    StateSnapshotTransformer tr = t.get();
    switch (meta.getStateType()) {
      case LIST:
        return new ListT(((ListSerializer) s).getElementSerializer(), tr);
      case MAP:
        MapSerializer ms = (MapSerializer) s;
        return new MapT(ms.getKeySerializer(), ms.getValueSerializer(), tr);
      default:
        return new ValueT(s, tr);
    }
  }

  static <T> T read(TypeSerializer<T> s, ByteString b) throws IOException {
    return s.deserialize(new DataInputDeserializer(b.toByteArray()));
  }

  static <T> ByteString write(TypeSerializer<T> s, T v) throws IOException {
    DataOutputSerializer o = new DataOutputSerializer(64);
    s.serialize(v, o);
    return ByteString.copyFrom(o.getCopyOfBuffer());
  }

  private static final class ValueT<T> extends EntryTransformer {
    private final TypeSerializer<T> s;
    private final StateSnapshotTransformer<T> t;

    ValueT(TypeSerializer<T> s, StateSnapshotTransformer<T> t) {
      this.s = s;
      this.t = t;
    }

    @Override
    ViewEntry apply(ViewEntry e) throws IOException {
      T v = read(s, e.getValue());
      T r = t.filterOrTransform(v);
      if (r == null) {
        return null;
      }
      return r == v ? e : e.toBuilder().setValue(write(s, r)).build();
    }
  }

  private static final class ListT<T> extends EntryTransformer {
    private final TypeSerializer<T> el;
    private final StateSnapshotTransformer<List<T>> t;

    ListT(TypeSerializer<T> el, StateSnapshotTransformer<List<T>> t) {
      this.el = el;
      this.t = t;
    }

    @Override
    ViewEntry apply(ViewEntry e) throws IOException {
      List<T> l = new ArrayList<>(e.getValuesCount());
      for (ByteString b : e.getValuesList()) {
        l.add(read(el, b));
      }
      List<T> r = t.filterOrTransform(l);
      if (r == null || r.isEmpty()) {
        return null;
      }
      ViewEntry.Builder b = e.toBuilder().clearValues();
      for (T x : r) {
        b.addValues(write(el, x));
      }
      return b.build();
    }
  }

  private static final class MapT<UK, UV> extends EntryTransformer {
    private final TypeSerializer<UK> ks;
    private final TypeSerializer<UV> vs;
    private final StateSnapshotTransformer<Map<UK, UV>> t;

    MapT(TypeSerializer<UK> ks, TypeSerializer<UV> vs, StateSnapshotTransformer<Map<UK, UV>> t) {
      this.ks = ks;
      this.vs = vs;
      this.t = t;
    }

    @Override
    ViewEntry apply(ViewEntry e) throws IOException {
      UK k = read(ks, e.getUserKey());
      UV v = StatedMapState.readUserValue(vs, e.getValue().toByteArray(), "map");
      Map<UK, UV> one = new java.util.HashMap<>(Collections.singletonMap(k, v));
      Map<UK, UV> r = t.filterOrTransform(one);
      if (r == null || !r.containsKey(k)) {
        return null;
      }
      UV nv = r.get(k);
      if (nv == v) {
        return e;
      }
      DataOutputSerializer o = new DataOutputSerializer(64);
      o.writeBoolean(nv == null);
      if (nv != null) {
        vs.serialize(nv, o);
      }
      return e.toBuilder().setValue(ByteString.copyFrom(o.getCopyOfBuffer())).build();
    }
  }
}
