package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.nio.file.Files;
import java.util.Optional;
import java.util.Random;
import org.apache.flink.core.fs.FSDataInputStream;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.core.fs.Path;
import org.apache.flink.core.memory.DataInputViewStreamWrapper;
import org.apache.flink.runtime.state.KeyGroupRangeOffsets;
import org.apache.flink.runtime.state.KeyGroupsSavepointStateHandle;
import org.apache.flink.runtime.state.KeyGroupsStateHandle;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.PhysicalStateHandleID;
import org.apache.flink.runtime.state.StreamStateHandle;
import org.apache.flink.runtime.state.memory.ByteStreamStateHandle;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class RestoreStreamsTest {
  @TempDir java.nio.file.Path dir;

  /** The buffered stream answers every read, seek and skip as the raw file stream does. */
  @Test
  void bufferedStreamMatchesTheRawStream() throws IOException {
    Random r = new Random(42);
    byte[] data = new byte[300_000];
    r.nextBytes(data);
    java.nio.file.Path f = dir.resolve("data");
    Files.write(f, data);
    Path p = new Path(f.toUri());
    FileSystem fs = FileSystem.getLocalFileSystem();
    try (FSDataInputStream raw = fs.open(p);
        FSDataInputStream b = new RestoreStreams.BufferedInputStream(fs.open(p), 4096)) {
      for (int i = 0; i < 5000; i++) {
        int op = r.nextInt(10);
        if (op < 4) {
          assertThat(b.read()).isEqualTo(raw.read());
        } else if (op < 7) {
          // Sizes below, at and above the buffer's.
          int len = r.nextInt(3) == 0 ? 4096 + r.nextInt(10_000) : r.nextInt(300);
          byte[] x = new byte[len + 3];
          byte[] y = new byte[len + 3];
          int n = readFully(b, x, 3, len);
          int m = readFully(raw, y, 3, len);
          assertThat(n).isEqualTo(m);
          assertThat(x).isEqualTo(y);
        } else if (op < 9) {
          // Near the current position (inside the buffer) or anywhere.
          long to =
              r.nextBoolean()
                  ? Math.max(0, Math.min(data.length, b.getPos() + r.nextInt(2000) - 1000))
                  : r.nextInt(data.length + 1);
          b.seek(to);
          raw.seek(to);
        } else {
          // A file stream may skip past its end; the buffered one does as it does.
          long n = r.nextInt(6000);
          assertThat(b.skip(n)).isEqualTo(raw.skip(n));
        }
        assertThat(b.getPos()).isEqualTo(raw.getPos());
      }
      b.seek(data.length);
      assertThat(b.read()).isEqualTo(-1);
      assertThat(b.read(new byte[10], 0, 10)).isEqualTo(-1);
    }
  }

  /**
   * A restore's small reads (Flink's DataInputViewStreamWrapper reads a short as two single bytes)
   * reach the underlying stream as few large reads once the handle is wrapped.
   */
  @Test
  void wrappedHandleReadsInLargeChunks() throws Exception {
    byte[] data = new byte[200_000];
    new Random(7).nextBytes(data);
    Counting h = new Counting(data);
    KeyGroupRangeOffsets offsets = new KeyGroupRangeOffsets(0, 3);
    KeyedStateHandle w = RestoreStreams.buffered(new KeyGroupsStateHandle(offsets, h));
    assertThat(w).isExactlyInstanceOf(KeyGroupsStateHandle.class);
    assertThat(((KeyGroupsStateHandle) w).getGroupRangeOffsets()).isEqualTo(offsets);
    try (FSDataInputStream in = ((KeyGroupsStateHandle) w).openInputStream()) {
      DataInputViewStreamWrapper v = new DataInputViewStreamWrapper(in);
      for (int i = 0; i < data.length / 2; i++) {
        short s = v.readShort();
        assertThat(s).isEqualTo((short) (((data[2 * i] & 0xff) << 8) | (data[2 * i + 1] & 0xff)));
      }
    }
    // 200 000 bytes through a 64 KiB buffer: 4 reads, and one that finds the end at most.
    assertThat(h.calls).isLessThanOrEqualTo(5);

    // The unwrapped handle, as the restore read it before: one call per byte.
    Counting raw = new Counting(data);
    try (FSDataInputStream in = new KeyGroupsStateHandle(offsets, raw).openInputStream()) {
      DataInputViewStreamWrapper v = new DataInputViewStreamWrapper(in);
      for (int i = 0; i < 1000; i++) {
        v.readShort();
      }
    }
    assertThat(raw.calls).isEqualTo(2000);
  }

  @Test
  void savepointHandlesStaySavepointsAndInMemoryHandlesStayAsTheyAre() {
    KeyGroupRangeOffsets offsets = new KeyGroupRangeOffsets(0, 3);
    KeyedStateHandle sp =
        RestoreStreams.buffered(
            new KeyGroupsSavepointStateHandle(offsets, new Counting(new byte[1])));
    assertThat(sp).isExactlyInstanceOf(KeyGroupsSavepointStateHandle.class);
    assertThat(((KeyGroupsStateHandle) sp).getDelegateStateHandle())
        .isInstanceOf(RestoreStreams.BufferedHandle.class);

    KeyGroupsStateHandle mem =
        new KeyGroupsStateHandle(offsets, new ByteStreamStateHandle("m", new byte[] {1, 2}));
    assertThat(RestoreStreams.buffered(mem)).isSameAs(mem);
  }

  private static int readFully(FSDataInputStream in, byte[] b, int off, int len)
      throws IOException {
    int total = 0;
    while (total < len) {
      int n = in.read(b, off + total, len - total);
      if (n < 0) {
        return total == 0 ? -1 : total;
      }
      total += n;
    }
    return total;
  }

  /** A stream handle not in memory whose streams count the calls that read them. */
  private static final class Counting implements StreamStateHandle {
    private static final long serialVersionUID = 1L;
    private final byte[] data;
    int calls;

    Counting(byte[] data) {
      this.data = data;
    }

    @Override
    public FSDataInputStream openInputStream() {
      ByteArrayInputStream in = new ByteArrayInputStream(data);
      return new FSDataInputStream() {
        @Override
        public void seek(long desired) {
          in.reset();
          in.skip(desired);
        }

        @Override
        public long getPos() {
          return data.length - in.available();
        }

        @Override
        public int read() {
          calls++;
          return in.read();
        }

        @Override
        public int read(byte[] b, int off, int len) {
          calls++;
          return in.read(b, off, len);
        }
      };
    }

    @Override
    public Optional<byte[]> asBytesIfInMemory() {
      return Optional.empty();
    }

    @Override
    public PhysicalStateHandleID getStreamStateHandleID() {
      return new PhysicalStateHandleID("counting");
    }

    @Override
    public void discardState() {}

    @Override
    public long getStateSize() {
      return data.length;
    }
  }
}
