package io.stated.flink.tools;

import java.io.DataInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.TypeSerializerSnapshot;
import org.apache.flink.api.common.typeutils.base.ListSerializer;
import org.apache.flink.api.common.typeutils.base.MapSerializer;
import org.apache.flink.core.fs.FSDataInputStream;
import org.apache.flink.core.io.PostVersionedIOReadableWritable;
import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.core.memory.DataInputView;
import org.apache.flink.core.memory.DataInputViewStreamWrapper;
import org.apache.flink.core.memory.DataOutputSerializer;
import org.apache.flink.runtime.checkpoint.Checkpoints;
import org.apache.flink.runtime.checkpoint.OperatorState;
import org.apache.flink.runtime.checkpoint.OperatorSubtaskState;
import org.apache.flink.runtime.checkpoint.metadata.CheckpointMetadata;
import org.apache.flink.runtime.state.CompletedCheckpointStorageLocation;
import org.apache.flink.runtime.state.CompositeKeySerializationUtils;
import org.apache.flink.runtime.state.FullSnapshotUtil;
import org.apache.flink.runtime.state.KeyGroupsStateHandle;
import org.apache.flink.runtime.state.KeyedBackendSerializationProxy;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.ListDelimitedSerializer;
import org.apache.flink.runtime.state.SnappyStreamCompressionDecorator;
import org.apache.flink.runtime.state.StreamCompressionDecorator;
import org.apache.flink.runtime.state.StreamStateHandle;
import org.apache.flink.runtime.state.UncompressedStreamCompressionDecorator;
import org.apache.flink.runtime.state.filesystem.AbstractFsCheckpointStorageAccess;
import org.apache.flink.runtime.state.filesystem.FileStateHandle;
import org.apache.flink.runtime.state.metainfo.StateMetaInfoSnapshot;
import org.apache.flink.runtime.state.metainfo.StateMetaInfoSnapshot.CommonOptionsKeys;
import org.apache.flink.runtime.state.metainfo.StateMetaInfoSnapshot.CommonSerializerKeys;
import org.apache.flink.streaming.api.operators.InternalTimerServiceSerializationProxy;
import org.apache.flink.streaming.api.operators.InternalTimersSnapshot;
import org.apache.flink.streaming.api.operators.InternalTimersSnapshotReaderWriters;
import org.apache.flink.streaming.api.operators.TimerHeapInternalTimer;

/**
 * Reads the keyed state of a Flink savepoint or retained full checkpoint: the {@code _metadata}
 * file through Flink's {@link Checkpoints}, then each subtask's key-grouped state file (Flink's
 * canonical format: a {@link KeyedBackendSerializationProxy} with the states' meta info and
 * serializer snapshots, then per key group the entries, located by the handle's key-group offsets).
 * stated's Flink backend, hashmap and rocksdb all write this format for canonical savepoints (and
 * stated and hashmap for checkpoints too).
 *
 * <p>Entries are handed to the caller one at a time: a key group is read as a stream, so memory
 * holds one entry (a list state's one key's list) at a time, whatever the savepoint's size.
 *
 * <p>Flink's files carry no checksums. What can be checked is: every file has the size its handle
 * recorded, every key group's entries carry that key group and known state ids, and each key group
 * ends with its end mark. A file that fails any check is refused with an {@link IOException} naming
 * it; a changed byte inside a value that still parses cannot be seen.
 */
public final class SavepointReader {
  /** The kinds of {@code stated state}: value, list, map and timers occur here. */
  public enum Kind {
    VALUE,
    LIST,
    MAP,
    TIMERS;

    @Override
    public String toString() {
      return name().toLowerCase(java.util.Locale.ROOT);
    }
  }

  /**
   * One entry: a value, a list element, a map entry or a timer. Decoded fields hold the objects the
   * state's serializers read; {@code raw*} their serialized bytes, for states whose serializers
   * could not be restored (the user's classes missing from the classpath).
   */
  public static final class Entry {
    public String operator;
    public int subtask;
    public String state;
    public Kind kind;
    public String flinkType;
    public int keyGroup;
    public Object key;
    public Object namespace;
    public Object userKey;
    public Object value;
    public int index;
    public long timestamp;

    /** Set when the key and namespace could not be decoded: the key's bytes after the prefix. */
    public byte[] rawKey;

    /** Set when the value (or map value, list element) could not be decoded. */
    public byte[] rawValue;

    /** Set when the user key could not be decoded. */
    public byte[] rawUserKey;

    /** Bytes the entry takes in the file (its key and value, as written). */
    public long storedBytes;

    /** Serializers of the state, for re-serializing decoded fields. */
    public TypeSerializer<Object> keySerializer;

    public TypeSerializer<Object> namespaceSerializer;
    public TypeSerializer<Object> userKeySerializer;
    public TypeSerializer<Object> valueSerializer;
  }

  /** Receives entries. */
  @FunctionalInterface
  public interface Sink {
    void accept(Entry e) throws IOException;
  }

  private final String pointer;
  private final CheckpointMetadata metadata;

  private SavepointReader(String pointer, CheckpointMetadata metadata) {
    this.pointer = pointer;
    this.metadata = metadata;
  }

  /**
   * Opens a savepoint or checkpoint directory (or its {@code _metadata} file), a local path or any
   * URI a Flink file system serves.
   */
  public static SavepointReader open(String path) throws IOException {
    String dir = path;
    String meta = "/" + AbstractFsCheckpointStorageAccess.METADATA_FILE_NAME;
    if (dir.endsWith(meta)) {
      dir = dir.substring(0, dir.length() - meta.length());
    }
    CompletedCheckpointStorageLocation loc;
    try {
      loc = AbstractFsCheckpointStorageAccess.resolveCheckpointPointer(dir);
    } catch (IOException e) {
      throw new IOException(
          path + " is not a Flink savepoint or checkpoint directory (no readable _metadata): " + e,
          e);
    }
    try (InputStream in = loc.getMetadataHandle().openInputStream()) {
      CheckpointMetadata m =
          Checkpoints.loadCheckpointMetadata(
              new DataInputStream(in),
              SavepointReader.class.getClassLoader(),
              loc.getExternalPointer());
      return new SavepointReader(loc.getExternalPointer(), m);
    } catch (IOException | RuntimeException e) {
      throw new IOException(
          "reading "
              + loc.getExternalPointer()
              + "/_metadata: "
              + e.getMessage()
              + " (is it a Flink "
              + org.apache.flink.runtime.util.EnvironmentInformation.getVersion()
              + " savepoint, and are the job's classes on the classpath?)",
          e);
    }
  }

  /** The savepoint's location. */
  public String pointer() {
    return pointer;
  }

  /** The checkpoint id the savepoint was taken as. */
  public long checkpointId() {
    return metadata.getCheckpointId();
  }

  /** The operator's name in exports: its uid, else its name, else its id in hex. */
  public static String operatorName(OperatorState op) {
    return op.getOperatorUid()
        .filter(s -> !s.isEmpty())
        .orElse(
            op.getOperatorName()
                .filter(s -> !s.isEmpty())
                .orElse(op.getOperatorID().toHexString()));
  }

  /** The operators with keyed state, in the order of their names. */
  public List<OperatorState> keyedOperators() {
    Map<String, OperatorState> byName = new TreeMap<>();
    for (OperatorState op : metadata.getOperatorStates()) {
      boolean keyed = false;
      for (OperatorSubtaskState s : op.getStates()) {
        keyed |= !s.getManagedKeyedState().isEmpty() || !s.getRawKeyedState().isEmpty();
      }
      if (keyed) {
        byName.put(operatorName(op), op);
      }
    }
    return new ArrayList<>(byName.values());
  }

  /** The file a handle reads, for errors: its path, or where it is inline. */
  public static String describe(StreamStateHandle h) {
    if (h instanceof FileStateHandle f) {
      return f.getFilePath().toString();
    }
    return h.maybeGetPath().map(Object::toString).orElse("state inline in _metadata (" + h + ")");
  }

  /** Reads every entry of one operator whose name passes {@code operatorFilter} (null: all). */
  public void scan(String operatorFilter, Sink sink) throws IOException {
    for (OperatorState op : keyedOperators()) {
      String name = operatorName(op);
      if (operatorFilter != null && !operatorFilter.equals(name)) {
        continue;
      }
      for (Map.Entry<Integer, OperatorSubtaskState> st :
          new TreeMap<>(op.getSubtaskStates()).entrySet()) {
        for (KeyedStateHandle h : st.getValue().getManagedKeyedState()) {
          if (!(h instanceof KeyGroupsStateHandle kh)) {
            throw new IOException(
                "operator "
                    + name
                    + " subtask "
                    + st.getKey()
                    + ": its keyed state is a "
                    + h.getClass().getSimpleName()
                    + " (an incremental or changelog checkpoint, or a native-format savepoint), which"
                    + " this tool does not read:"
                    + " take a canonical savepoint of the job (flink stop --savepointPath ...,"
                    + " the default format) and read that");
          }
          new HandleReader(name, st.getKey(), op.getMaxParallelism(), kh, sink).read();
        }
        // Raw keyed state: the timers a backend with JVM-side timers (stated's, rocksdb's
        // with heap timers in checkpoints) leaves to Flink's timer service to write.
        for (KeyedStateHandle h : st.getValue().getRawKeyedState()) {
          if (!(h instanceof KeyGroupsStateHandle kh)) {
            throw new IOException(
                "operator "
                    + name
                    + " subtask "
                    + st.getKey()
                    + ": raw keyed state of type "
                    + h.getClass().getSimpleName()
                    + " is not read by this tool");
          }
          new HandleReader(name, st.getKey(), op.getMaxParallelism(), kh, sink).readTimers();
        }
      }
    }
  }

  /** Reads one subtask's key-grouped state file. */
  private static final class HandleReader {
    private final String operator;
    private final int subtask;
    private final int prefixBytes;
    private final int maxParallelism;
    private final KeyGroupsStateHandle handle;
    private final Sink sink;
    private final String file;
    private final List<StateInfo> states = new ArrayList<>();
    private TypeSerializer<Object> keySerializer;

    HandleReader(
        String operator, int subtask, int maxParallelism, KeyGroupsStateHandle h, Sink sink) {
      this.operator = operator;
      this.subtask = subtask;
      this.prefixBytes =
          CompositeKeySerializationUtils.computeRequiredBytesInKeyGroupPrefix(maxParallelism);
      this.maxParallelism = maxParallelism;
      this.handle = h;
      this.sink = sink;
      this.file = describe(h.getDelegateStateHandle());
    }

    private IOException damaged(String what, Throwable cause) {
      return new IOException(
          "damaged Flink state file "
              + file
              + " (operator "
              + operator
              + " subtask "
              + subtask
              + "): "
              + what
              + "; nothing after this point was read: restore from another savepoint or"
              + " checkpoint"
              + (handle instanceof org.apache.flink.runtime.state.KeyGroupsSavepointStateHandle
                  ? ""
                  : " (this is a checkpoint, not a savepoint: if the job ran on hashmap, its"
                      + " checkpoints are in the heap backend's own format, which this tool"
                      + " does not read; read a canonical savepoint of the job)"),
          cause);
    }

    void read() throws IOException {
      checkSize();
      try (FSDataInputStream in = handle.openInputStream()) {
        StreamCompressionDecorator compression;
        try {
          KeyedBackendSerializationProxy<Object> proxy =
              new KeyedBackendSerializationProxy<>(SavepointReader.class.getClassLoader());
          proxy.read(new DataInputViewStreamWrapper(in));
          keySerializer = restore(proxy.getKeySerializerSnapshot());
          for (StateMetaInfoSnapshot m : proxy.getStateMetaInfoSnapshots()) {
            states.add(new StateInfo(m, keySerializer));
          }
          compression =
              proxy.isUsingKeyGroupCompression()
                  ? SnappyStreamCompressionDecorator.INSTANCE
                  : UncompressedStreamCompressionDecorator.INSTANCE;
        } catch (IOException | RuntimeException e) {
          throw damaged("its header (states and serializers) does not read: " + e, e);
        }
        for (int kg : handle.getKeyGroupRange()) {
          long offset = handle.getOffsetForKeyGroup(kg);
          if (offset == 0) {
            continue; // the key group holds no entries
          }
          try {
            in.seek(offset);
            readKeyGroup(
                kg, new DataInputViewStreamWrapper(compression.decorateWithCompression(in)));
          } catch (IOException | RuntimeException e) {
            if (e.getMessage() != null && e.getMessage().startsWith("damaged Flink state file")) {
              throw (IOException) e;
            }
            throw damaged("key group " + kg + " at offset " + offset + " does not read: " + e, e);
          }
        }
      }
    }

    /**
     * Reads raw keyed state as Flink's timer service writes it: per key group, its timer services,
     * each with its serializers' snapshots and its event and processing time timers (read through
     * Flink's InternalTimersSnapshotReaderWriters). One key group's timers of one service are in
     * memory at a time, as Flink's restore holds them.
     */
    void readTimers() throws IOException {
      checkSize();
      try (FSDataInputStream in = handle.openInputStream()) {
        Entry e = new Entry();
        DataOutputSerializer sizer = new DataOutputSerializer(64);
        for (int kg : handle.getKeyGroupRange()) {
          long offset = handle.getOffsetForKeyGroup(kg);
          TimerGroup g = new TimerGroup();
          try {
            in.seek(offset);
            g.read(new NonClosing(in));
          } catch (IOException | RuntimeException x) {
            throw damaged(
                "the timers of key group " + kg + " at offset " + offset + " do not read: " + x, x);
          }
          for (Map.Entry<String, InternalTimersSnapshot<?, ?>> svc : g.services) {
            InternalTimersSnapshot<?, ?> t = svc.getValue();
            TypeSerializer<Object> ks = restore(t.getKeySerializerSnapshot());
            TypeSerializer<Object> ns = restore(t.getNamespaceSerializerSnapshot());
            emitTimers(
                e, sizer, kg, "_timer_state/event_" + svc.getKey(), t.getEventTimeTimers(), ks, ns);
            emitTimers(
                e,
                sizer,
                kg,
                "_timer_state/processing_" + svc.getKey(),
                t.getProcessingTimeTimers(),
                ks,
                ns);
          }
        }
      }
    }

    private void emitTimers(
        Entry e,
        DataOutputSerializer sizer,
        int kg,
        String state,
        java.util.Set<? extends TimerHeapInternalTimer<?, ?>> timers,
        TypeSerializer<Object> ks,
        TypeSerializer<Object> ns)
        throws IOException {
      if (timers == null || timers.isEmpty()) {
        return;
      }
      List<TimerHeapInternalTimer<?, ?>> sorted = new ArrayList<>(timers);
      sorted.sort(java.util.Comparator.comparingLong(TimerHeapInternalTimer::getTimestamp));
      for (TimerHeapInternalTimer<?, ?> t : sorted) {
        int got =
            org.apache.flink.runtime.state.KeyGroupRangeAssignment.assignToKeyGroup(
                t.getKey(), maxParallelism);
        if (got != kg) {
          throw damaged("a timer of key group " + kg + " has a key of key group " + got, null);
        }
        e.operator = operator;
        e.subtask = subtask;
        e.state = state;
        e.kind = Kind.TIMERS;
        e.flinkType = "RAW_KEYED_STATE";
        e.keyGroup = kg;
        e.key = t.getKey();
        e.namespace = t.getNamespace();
        e.userKey = e.value = null;
        e.rawKey = e.rawValue = e.rawUserKey = null;
        e.index = 0;
        e.timestamp = t.getTimestamp();
        e.keySerializer = ks;
        e.namespaceSerializer = ns;
        e.userKeySerializer = e.valueSerializer = null;
        sizer.clear();
        if (ks != null && ns != null) {
          ks.serialize(t.getKey(), sizer);
          ns.serialize(t.getNamespace(), sizer);
        }
        e.storedBytes = sizer.length() + 8;
        sink.accept(e);
      }
    }

    /** A file shorter or longer than its handle recorded was cut or appended to. */
    private void checkSize() throws IOException {
      StreamStateHandle d = handle.getDelegateStateHandle();
      if (d instanceof FileStateHandle f) {
        org.apache.flink.core.fs.FileSystem fs = f.getFilePath().getFileSystem();
        long actual;
        try {
          actual = fs.getFileStatus(f.getFilePath()).getLen();
        } catch (IOException e) {
          throw new IOException(
              "Flink state file " + file + " of operator " + operator + " is missing: " + e, e);
        }
        if (actual != f.getStateSize()) {
          throw damaged(
              "it has " + actual + " bytes, the savepoint recorded " + f.getStateSize(), null);
        }
      }
    }

    private void readKeyGroup(int kg, DataInputViewStreamWrapper in) throws IOException {
      int stateId = in.readShort() & FullSnapshotUtil.END_OF_KEY_GROUP_MARK;
      Entry e = new Entry();
      while (stateId != FullSnapshotUtil.END_OF_KEY_GROUP_MARK) {
        if (stateId >= states.size()) {
          throw damaged(
              "key group " + kg + " names state " + stateId + " of " + states.size(), null);
        }
        StateInfo s = states.get(stateId);
        byte[] key = readBytes(in, kg);
        byte[] value = readBytes(in, kg);
        boolean last = FullSnapshotUtil.hasMetaDataFollowsFlag(key);
        FullSnapshotUtil.clearMetaDataFollowsFlag(key);
        int got = CompositeKeySerializationUtils.extractKeyGroup(prefixBytes, key);
        if (got != kg) {
          throw damaged("an entry of key group " + kg + " carries key group " + got, null);
        }
        emit(e, s, kg, key, value);
        if (last) {
          stateId = in.readShort() & FullSnapshotUtil.END_OF_KEY_GROUP_MARK;
        }
      }
    }

    private byte[] readBytes(DataInputViewStreamWrapper in, int kg) throws IOException {
      int n = in.readInt();
      if (n < 0 || n > (256 << 20)) {
        throw damaged("key group " + kg + " has an entry of " + n + " bytes", null);
      }
      byte[] b = new byte[n];
      in.readFully(b);
      return b;
    }

    private void emit(Entry e, StateInfo s, int kg, byte[] key, byte[] value) throws IOException {
      e.operator = operator;
      e.subtask = subtask;
      e.state = s.name;
      e.kind = s.kind;
      e.flinkType = s.flinkType;
      e.keyGroup = kg;
      e.key = e.namespace = e.userKey = e.value = null;
      e.rawKey = e.rawValue = e.rawUserKey = null;
      e.index = 0;
      e.timestamp = 0;
      e.keySerializer = keySerializer;
      e.namespaceSerializer = s.namespace;
      e.userKeySerializer = s.userKey;
      e.valueSerializer = s.value;
      e.storedBytes = key.length + value.length;
      DataInputDeserializer k =
          new DataInputDeserializer(key, prefixBytes, key.length - prefixBytes);
      if (s.kind == Kind.TIMERS) {
        if (s.value == null) {
          e.rawKey = java.util.Arrays.copyOfRange(key, prefixBytes, key.length);
        } else {
          Object t = s.value.deserialize(k);
          if (t instanceof TimerHeapInternalTimer<?, ?> timer) {
            e.timestamp = timer.getTimestamp();
            e.key = timer.getKey();
            e.namespace = timer.getNamespace();
            e.keySerializer = keySerializer;
          } else {
            e.value = t; // a priority queue of the user's own elements
          }
        }
        sink.accept(e);
        return;
      }
      if (keySerializer == null || s.namespace == null) {
        e.rawKey = java.util.Arrays.copyOfRange(key, prefixBytes, key.length);
      } else {
        e.key = CompositeKeySerializationUtils.readKey(keySerializer, k, s.ambiguous);
        e.namespace = CompositeKeySerializationUtils.readNamespace(s.namespace, k, s.ambiguous);
      }
      switch (s.kind) {
        case MAP -> {
          if (e.rawKey == null && s.userKey != null) {
            e.userKey = s.userKey.deserialize(k);
          } else if (e.rawKey == null) {
            e.rawUserKey = java.util.Arrays.copyOfRange(key, k.getPosition(), key.length);
          }
          DataInputDeserializer v = new DataInputDeserializer(value);
          boolean isNull = v.readBoolean();
          if (isNull) {
            e.value = null;
          } else if (s.value != null) {
            e.value = s.value.deserialize(v);
          } else {
            e.rawValue = java.util.Arrays.copyOfRange(value, 1, value.length);
          }
          sink.accept(e);
        }
        case LIST -> {
          if (s.value == null) {
            e.rawValue = value;
            sink.accept(e);
            return;
          }
          DataInputDeserializer v = new DataInputDeserializer(value);
          int i = 0;
          while (v.available() > 0) {
            e.value = ListDelimitedSerializer.deserializeNextElement(v, s.value);
            e.index = i++;
            sink.accept(e);
          }
        }
        default -> {
          if (s.value != null) {
            e.value = s.value.deserialize(new DataInputDeserializer(value));
          } else {
            e.rawValue = value;
          }
          sink.accept(e);
        }
      }
    }
  }

  /** One key group of Flink's timer service in raw keyed state: its services' timers. */
  private static final class TimerGroup extends PostVersionedIOReadableWritable {
    final List<Map.Entry<String, InternalTimersSnapshot<?, ?>>> services = new ArrayList<>();

    @Override
    public int getVersion() {
      return InternalTimerServiceSerializationProxy.VERSION;
    }

    @Override
    public int[] getCompatibleVersions() {
      return new int[] {InternalTimerServiceSerializationProxy.VERSION, 1};
    }

    @Override
    protected void read(DataInputView in, boolean wasVersioned) throws IOException {
      int n = in.readInt();
      if (n < 0 || n > 1 << 16) {
        throw new IOException(n + " timer services");
      }
      for (int i = 0; i < n; i++) {
        String name = in.readUTF();
        int v = wasVersioned ? getReadVersion() : InternalTimersSnapshotReaderWriters.NO_VERSION;
        InternalTimersSnapshot<?, ?> t =
            InternalTimersSnapshotReaderWriters.getReaderForVersion(
                    v, SavepointReader.class.getClassLoader())
                .readTimersSnapshot(in);
        services.add(Map.entry(name, t));
      }
    }
  }

  /** The state file's stream without its close: the reader closes it once, at the end. */
  private static final class NonClosing extends java.io.FilterInputStream {
    NonClosing(InputStream in) {
      super(in);
    }

    @Override
    public void close() {}
  }

  /** A state of a handle: its name, kind and the serializers restored from its snapshots. */
  private static final class StateInfo {
    final String name;
    final Kind kind;
    final String flinkType;
    final TypeSerializer<Object> namespace;
    final TypeSerializer<Object> userKey;

    /** The value's serializer; a list's element serializer; a timer queue's element serializer. */
    final TypeSerializer<Object> value;

    final boolean ambiguous;

    @SuppressWarnings("unchecked")
    StateInfo(StateMetaInfoSnapshot m, TypeSerializer<Object> keySerializer) {
      name = m.getName();
      namespace = restore(m.getTypeSerializerSnapshot(CommonSerializerKeys.NAMESPACE_SERIALIZER));
      TypeSerializer<Object> v =
          restore(m.getTypeSerializerSnapshot(CommonSerializerKeys.VALUE_SERIALIZER));
      TypeSerializer<Object> uk =
          restore(m.getTypeSerializerSnapshot(CommonSerializerKeys.USER_KEY_SERIALIZER));
      switch (m.getBackendStateType()) {
        case PRIORITY_QUEUE -> {
          kind = Kind.TIMERS;
          flinkType = "PRIORITY_QUEUE";
        }
        case KEY_VALUE, KEY_VALUE_V2 -> {
          flinkType = String.valueOf(m.getOption(CommonOptionsKeys.KEYED_STATE_TYPE));
          kind =
              switch (flinkType) {
                case "LIST" -> Kind.LIST;
                case "MAP" -> Kind.MAP;
                default -> Kind.VALUE; // VALUE, REDUCING, AGGREGATING: one value a key
              };
        }
        default ->
            throw new IllegalStateException(
                "state " + name + " is of type " + m.getBackendStateType() + ", not keyed state");
      }
      Object vs = v;
      if (kind == Kind.LIST && vs instanceof ListSerializer<?> ls) {
        v = (TypeSerializer<Object>) ls.getElementSerializer();
      } else if (kind == Kind.LIST) {
        v = null;
      }
      if (kind == Kind.MAP && vs instanceof MapSerializer<?, ?> ms) {
        if (uk == null) {
          uk = (TypeSerializer<Object>) ms.getKeySerializer();
        }
        v = (TypeSerializer<Object>) ms.getValueSerializer();
      } else if (kind == Kind.MAP) {
        v = null;
      }
      value = v;
      userKey = uk;
      ambiguous =
          keySerializer != null
              && namespace != null
              && CompositeKeySerializationUtils.isAmbiguousKeyPossible(keySerializer, namespace);
    }
  }

  /** The serializer of a snapshot, or null when it cannot be restored (its classes missing). */
  @SuppressWarnings("unchecked")
  private static TypeSerializer<Object> restore(TypeSerializerSnapshot<?> s) {
    if (s == null) {
      return null;
    }
    try {
      return (TypeSerializer<Object>) s.restoreSerializer();
    } catch (RuntimeException | LinkageError e) {
      return null;
    }
  }
}
