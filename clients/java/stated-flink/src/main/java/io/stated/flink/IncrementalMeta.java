package io.stated.flink;

import com.google.protobuf.ByteString;
import java.io.IOException;
import java.io.InputStream;
import java.util.List;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.core.memory.DataInputView;
import org.apache.flink.core.memory.DataInputViewStreamWrapper;
import org.apache.flink.core.memory.DataOutputView;
import org.apache.flink.runtime.state.IncrementalRemoteKeyedStateHandle;
import org.apache.flink.runtime.state.KeyedBackendSerializationProxy;
import org.apache.flink.runtime.state.metainfo.StateMetaInfoSnapshot;

/**
 * The meta stream of an incremental checkpoint of this backend (the {@code metaStateHandle} of its
 * {@link IncrementalRemoteKeyedStateHandle}): a magic number and version, Flink's {@link
 * KeyedBackendSerializationProxy} (the key serializer's and the states' serializer snapshots, so a
 * restore checks compatibility as after a full snapshot), then the daemon's task handle, which the
 * restore passes back to the daemon.
 */
record IncrementalMeta(KeyedBackendSerializationProxy<?> proxy, ByteString taskHandle) {
  /** "STIN": a stream of another backend fails with a message, not a serializer error. */
  static final int MAGIC = 0x5354494e;

  static final int VERSION = 1;

  /** Task handles larger than this are refused as corrupt (they are a few KiB of JSON). */
  private static final int MAX_TASK_HANDLE = 64 << 20;

  static <K> void write(
      DataOutputView out,
      TypeSerializer<K> keySerializer,
      List<StateMetaInfoSnapshot> states,
      ByteString taskHandle)
      throws IOException {
    out.writeInt(MAGIC);
    out.writeInt(VERSION);
    new KeyedBackendSerializationProxy<>(keySerializer, states, false).write(out);
    out.writeInt(taskHandle.size());
    out.write(taskHandle.toByteArray());
  }

  static IncrementalMeta read(IncrementalRemoteKeyedStateHandle h, ClassLoader cl)
      throws IOException {
    try (InputStream in = h.getMetaDataStateHandle().openInputStream()) {
      DataInputView view = new DataInputViewStreamWrapper(in);
      int magic = view.readInt();
      if (magic != MAGIC) {
        throw new IOException(
            "the meta stream of incremental handle "
                + h.getStateHandleId()
                + " (checkpoint "
                + h.getCheckpointId()
                + ") is not of the stated backend (magic 0x"
                + Integer.toHexString(magic)
                + "); an incremental checkpoint of another backend (RocksDB, ForSt) cannot be"
                + " restored on stated: take a canonical savepoint of it");
      }
      int version = view.readInt();
      if (version != VERSION) {
        throw new IOException(
            "the meta stream of incremental handle "
                + h.getStateHandleId()
                + " has version "
                + version
                + "; this stated backend reads version "
                + VERSION);
      }
      KeyedBackendSerializationProxy<?> proxy = new KeyedBackendSerializationProxy<>(cl);
      proxy.read(view);
      int n = view.readInt();
      if (n <= 0 || n > MAX_TASK_HANDLE) {
        throw new IOException(
            "the meta stream of incremental handle "
                + h.getStateHandleId()
                + " holds a task handle of "
                + n
                + " bytes: corrupt");
      }
      byte[] b = new byte[n];
      view.readFully(b);
      return new IncrementalMeta(proxy, ByteString.copyFrom(b));
    }
  }
}
