package io.stated.flink;

import com.google.protobuf.ByteString;
import io.stated.api.v1.ScanViewRequest;
import io.stated.api.v1.ScanViewResponse;
import io.stated.api.v1.ViewEntry;
import io.stated.api.v1.ViewInfo;
import io.stated.client.Loader;
import java.io.IOException;
import java.util.Iterator;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.common.typeutils.base.ListSerializer;
import org.apache.flink.api.common.typeutils.base.MapSerializer;
import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.core.memory.DataOutputSerializer;
import org.apache.flink.runtime.state.RegisteredKeyValueStateBackendMetaInfo;
import org.apache.flink.runtime.state.ttl.TtlAwareSerializer;
import org.apache.flink.util.StateMigrationException;

/**
 * Migrates the stored values of one state whose new serializer is "compatible after migration":
 * every entry is read from a view of the instance with the previous serializer and written back,
 * with a bulk load, in the new one (through Flink's TtlAwareSerializer, which also adds or drops
 * the TTL wrapper when a state's TTL was switched on or off). Map user keys are not migrated: a map
 * whose key serializer needs it is refused, as RocksDB refuses it.
 */
final class StatedMigration<K, N, SV> {
  private final StatedKeyedStateBackend<K> backend;
  private final RegisteredKeyValueStateBackendMetaInfo<N, SV> meta;

  StatedMigration(
      StatedKeyedStateBackend<K> backend, RegisteredKeyValueStateBackendMetaInfo<N, SV> meta) {
    this.backend = backend;
    this.meta = meta;
  }

  @SuppressWarnings({"unchecked", "rawtypes"})
  void run() throws Exception {
    String name = meta.getName();
    TypeSerializer<?> prev = meta.getPreviousStateSerializer();
    TypeSerializer<?> cur = meta.getStateSerializer();
    Converter conv;
    switch (meta.getStateType()) {
      case LIST:
        conv =
            new Converter(
                ((ListSerializer) prev).getElementSerializer(),
                ((ListSerializer) cur).getElementSerializer());
        break;
      case MAP:
        MapSerializer pm = (MapSerializer) prev;
        MapSerializer cm = (MapSerializer) cur;
        if (!cm.getKeySerializer()
            .snapshotConfiguration()
            .resolveSchemaCompatibility(pm.getKeySerializer().snapshotConfiguration())
            .isCompatibleAsIs()) {
          throw new StateMigrationException(
              "The new key serializer of map state "
                  + name
                  + " is not compatible as it is; map keys cannot be migrated.");
        }
        conv = new Converter(pm.getValueSerializer(), cm.getValueSerializer());
        break;
      default:
        conv = new Converter(prev, cur);
    }
    backend.daemon().sync();
    ViewInfo view = backend.takeView();
    try (Loader loader = backend.instance().load()) {
      Iterator<ScanViewResponse> pages =
          backend
              .instance()
              .scanView(ScanViewRequest.newBuilder().setViewId(view.getViewId()).build());
      while (pages.hasNext()) {
        for (ViewEntry e : pages.next().getEntriesList()) {
          if (!view.getStates(e.getStateId()).getName().equals(name)) {
            continue;
          }
          ViewEntry.Builder b = e.toBuilder().setState(name);
          switch (e.getKind()) {
            case STATE_KIND_LIST:
              b.clearValues();
              for (ByteString x : e.getValuesList()) {
                b.addValues(conv.convert(x.toByteArray(), false));
              }
              break;
            case STATE_KIND_MAP:
              b.setValue(conv.convert(e.getValue().toByteArray(), true));
              break;
            default:
              b.setValue(conv.convert(e.getValue().toByteArray(), false));
          }
          loader.add(b.build());
        }
      }
      loader.finish();
    } finally {
      backend.releaseView(view);
    }
  }

  /** One value from the previous serializer to the new one. */
  private final class Converter {
    private final TtlAwareSerializer<Object, ?> prior;
    private final TtlAwareSerializer<Object, ?> next;

    @SuppressWarnings("unchecked")
    Converter(TypeSerializer<?> prior, TypeSerializer<?> next) {
      this.prior = (TtlAwareSerializer<Object, ?>) TtlAwareSerializer.wrapTtlAwareSerializer(prior);
      this.next = (TtlAwareSerializer<Object, ?>) TtlAwareSerializer.wrapTtlAwareSerializer(next);
    }

    /** {@code nullFlag}: a map value, a null flag before the value. */
    ByteString convert(byte[] b, boolean nullFlag) throws IOException {
      DataInputDeserializer in = new DataInputDeserializer(b);
      DataOutputSerializer out = new DataOutputSerializer(b.length + 16);
      if (nullFlag) {
        boolean isNull = in.readBoolean();
        out.writeBoolean(isNull);
        if (isNull) {
          return ByteString.copyFrom(out.getCopyOfBuffer());
        }
      }
      next.migrateValueFromPriorSerializer(
          prior, () -> prior.deserialize(in), out, backend.ttlTimeProvider());
      return ByteString.copyFrom(out.getCopyOfBuffer());
    }
  }
}
