package io.stated.flink;

import io.stated.api.v1.ScanViewRequest;
import io.stated.api.v1.ScanViewResponse;
import io.stated.api.v1.ViewEntry;
import io.stated.api.v1.ViewInfo;
import java.io.IOException;
import java.util.Iterator;
import java.util.List;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.core.memory.DataOutputSerializer;
import org.apache.flink.runtime.state.CompositeKeySerializationUtils;
import org.apache.flink.runtime.state.FullSnapshotResources;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyValueStateIterator;
import org.apache.flink.runtime.state.RegisteredKeyValueStateBackendMetaInfo;
import org.apache.flink.runtime.state.StreamCompressionDecorator;
import org.apache.flink.runtime.state.metainfo.StateMetaInfoSnapshot;

/** A frozen daemon view and the states' meta info, for one full snapshot. */
final class StatedSnapshotResources<K> implements FullSnapshotResources<K> {
  /** ListDelimitedSerializer's delimiter between a list's elements. */
  static final byte LIST_DELIMITER = ',';

  private final StatedKeyedStateBackend<K> backend;
  private final ViewInfo view;
  private final List<StateMetaInfoSnapshot> snaps;

  /** The key/value state of each view state id; null for a timer queue ({@link StatedQueues}). */
  private final List<RegisteredKeyValueStateBackendMetaInfo<?, ?>> byId;

  private final TypeSerializer<K> keySerializer;
  private final List<EntryTransformer> transformers;

  StatedSnapshotResources(
      StatedKeyedStateBackend<K> backend,
      ViewInfo view,
      List<StateMetaInfoSnapshot> snaps,
      List<RegisteredKeyValueStateBackendMetaInfo<?, ?>> byId,
      List<EntryTransformer> transformers) {
    this.backend = backend;
    this.transformers = transformers;
    this.view = view;
    this.snaps = snaps;
    this.byId = byId;
    this.keySerializer = backend.getKeySerializer().duplicate();
  }

  @Override
  public List<StateMetaInfoSnapshot> getMetaInfoSnapshots() {
    return snaps;
  }

  @Override
  public KeyValueStateIterator createKVStateIterator() {
    return new ViewIterator();
  }

  @Override
  public KeyGroupRange getKeyGroupRange() {
    return backend.getKeyGroupRange();
  }

  @Override
  public TypeSerializer<K> getKeySerializer() {
    return keySerializer;
  }

  @Override
  public StreamCompressionDecorator getStreamCompressionDecorator() {
    return backend.getKeyGroupCompressionDecorator();
  }

  private final java.util.concurrent.atomic.AtomicBoolean released =
      new java.util.concurrent.atomic.AtomicBoolean();

  @Override
  public void release() {
    if (view != null && released.compareAndSet(false, true)) {
      backend.releaseView(view);
    }
  }

  /**
   * The view's entries in the canonical format: composite keys (key-group prefix, key, namespace,
   * with their lengths when both are of variable size, then a map entry's user key) and values as
   * Flink's full snapshot writes them (a list's elements joined by the delimiter; a map value with
   * its null flag, as the daemon stores it). Empty lists are skipped.
   */
  private final class ViewIterator implements KeyValueStateIterator {
    private final int prefixBytes =
        CompositeKeySerializationUtils.computeRequiredBytesInKeyGroupPrefix(
            backend.getNumberOfKeyGroups());
    private final boolean[] ambiguous;
    private final Iterator<ScanViewResponse> pages;
    private List<ViewEntry> page = List.of();
    private int pos;
    private final DataOutputSerializer out = new DataOutputSerializer(128);
    private boolean valid;
    private int keyGroup = -1;
    private int stateId = -1;
    private boolean newKeyGroup;
    private boolean newState;
    private byte[] key;
    private byte[] value;

    ViewIterator() {
      ambiguous = new boolean[byId.size()];
      for (int i = 0; i < byId.size(); i++) {
        ambiguous[i] =
            byId.get(i) != null
                && CompositeKeySerializationUtils.isAmbiguousKeyPossible(
                    keySerializer, byId.get(i).getNamespaceSerializer());
      }
      pages =
          backend
              .instance()
              .scanView(
                  ScanViewRequest.newBuilder()
                      .setViewId(view.getViewId())
                      .setPageBytes(1 << 20)
                      .build());
      try {
        next();
      } catch (IOException e) {
        throw new IllegalStateException(e);
      }
    }

    private ViewEntry nextEntry() {
      while (pos >= page.size()) {
        if (!pages.hasNext()) {
          return null;
        }
        page = pages.next().getEntriesList();
        pos = 0;
      }
      return page.get(pos++);
    }

    @Override
    public void next() throws IOException {
      while (true) {
        ViewEntry e = nextEntry();
        if (e == null) {
          valid = false;
          return;
        }
        int id = e.getStateId();
        if (id >= byId.size()) {
          throw new IOException("the view names state " + id + " beyond its " + byId.size());
        }
        if (byId.get(id) == null) {
          // A timer queue's element (see StatedQueues): the key-group prefix
          // and the element's bytes, an empty value, as Flink's backends
          // write a PRIORITY_QUEUE state.
          if (e.getKind() != io.stated.api.v1.StateKind.STATE_KIND_MAP) {
            throw new IOException(
                "the view holds an entry of kind "
                    + e.getKind()
                    + " in timer queue state "
                    + snaps.get(id).getName()
                    + ", which is a map");
          }
          out.clear();
          CompositeKeySerializationUtils.writeKeyGroup(e.getKeyGroup(), prefixBytes, out);
          out.write(e.getUserKey().toByteArray());
          set(e.getKeyGroup(), id, out.getCopyOfBuffer(), new byte[0]);
          return;
        }
        EntryTransformer t = transformers.get(id);
        if (t != null) {
          e = t.apply(e);
          if (e == null) {
            continue;
          }
        }
        byte[] v;
        switch (e.getKind()) {
          case STATE_KIND_VALUE:
            v = e.getValue().toByteArray();
            break;
          case STATE_KIND_MAP:
            v = e.getValue().toByteArray();
            break;
          case STATE_KIND_LIST:
            if (e.getValuesCount() == 0) {
              continue;
            }
            out.clear();
            for (int i = 0; i < e.getValuesCount(); i++) {
              if (i > 0) {
                out.write(LIST_DELIMITER);
              }
              out.write(e.getValues(i).toByteArray());
            }
            v = out.getCopyOfBuffer();
            break;
          default:
            throw new IOException(
                "the view holds an entry of kind " + e.getKind() + " that Flink states do not use");
        }
        out.clear();
        CompositeKeySerializationUtils.writeKeyGroup(e.getKeyGroup(), prefixBytes, out);
        byte[] k = e.getKey().toByteArray();
        out.write(k);
        if (ambiguous[id]) {
          CompositeKeySerializationUtils.writeVariableIntBytes(k.length, out);
        }
        byte[] n = e.getNamespace().toByteArray();
        out.write(n);
        if (ambiguous[id]) {
          CompositeKeySerializationUtils.writeVariableIntBytes(n.length, out);
        }
        if (e.getKind() == io.stated.api.v1.StateKind.STATE_KIND_MAP) {
          out.write(e.getUserKey().toByteArray());
        }
        set(e.getKeyGroup(), id, out.getCopyOfBuffer(), v);
        return;
      }
    }

    private void set(int kg, int id, byte[] k, byte[] v) {
      newKeyGroup = kg != keyGroup;
      newState = newKeyGroup || id != stateId;
      keyGroup = kg;
      stateId = id;
      key = k;
      value = v;
      valid = true;
    }

    @Override
    public int keyGroup() {
      return keyGroup;
    }

    @Override
    public byte[] key() {
      return key;
    }

    @Override
    public byte[] value() {
      return value;
    }

    @Override
    public int kvStateId() {
      return stateId;
    }

    @Override
    public boolean isNewKeyValueState() {
      return newState;
    }

    @Override
    public boolean isNewKeyGroup() {
      return newKeyGroup;
    }

    @Override
    public boolean isValid() {
      return valid;
    }

    @Override
    public void close() {}
  }
}
