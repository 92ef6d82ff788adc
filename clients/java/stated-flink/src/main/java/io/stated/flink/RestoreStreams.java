package io.stated.flink;

import java.io.IOException;
import java.util.Optional;
import org.apache.flink.core.fs.FSDataInputStream;
import org.apache.flink.core.fs.Path;
import org.apache.flink.runtime.state.KeyGroupsSavepointStateHandle;
import org.apache.flink.runtime.state.KeyGroupsStateHandle;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.PhysicalStateHandleID;
import org.apache.flink.runtime.state.StreamStateHandle;

/**
 * Buffered reads for a restore. Flink's {@code FullSnapshotRestoreOperation} reads the checkpoint
 * stream through a {@code DataInputViewStreamWrapper} straight on the handle's stream, and the
 * local file system's stream is an unbuffered {@code FileInputStream}: every {@code readShort} or
 * length prefix became one or more system calls (a jstack of a 100 MiB restore showed most samples
 * in single-byte {@code FileInputStream.read0}). Wrapping the handle so that its stream is buffered
 * keeps Flink's reader and its format unchanged.
 */
final class RestoreStreams {
  /** Large enough that a key group's entries arrive in a few reads, small per open handle. */
  static final int BUFFER_BYTES = 64 << 10;

  private RestoreStreams() {}

  /**
   * The handle with a buffered stream: a key-groups handle (savepoint or checkpoint) whose data is
   * not in memory gets a buffering delegate; any other handle is returned as it is (the restore
   * reports one it cannot read).
   */
  static KeyedStateHandle buffered(KeyedStateHandle h) {
    if (!(h instanceof KeyGroupsStateHandle)) {
      return h;
    }
    KeyGroupsStateHandle k = (KeyGroupsStateHandle) h;
    StreamStateHandle d = k.getDelegateStateHandle();
    if (d == null || d.asBytesIfInMemory().isPresent()) {
      return h;
    }
    StreamStateHandle b = new BufferedHandle(d);
    if (h instanceof KeyGroupsSavepointStateHandle) {
      return new KeyGroupsSavepointStateHandle(k.getGroupRangeOffsets(), b);
    }
    if (h.getClass() != KeyGroupsStateHandle.class) {
      // A subclass we do not know: rebuilding it as its parent could drop what it adds.
      return h;
    }
    return new KeyGroupsStateHandle(k.getGroupRangeOffsets(), b);
  }

  /** A stream handle that opens its delegate's stream behind a buffer; all else delegates. */
  static final class BufferedHandle implements StreamStateHandle {
    private static final long serialVersionUID = 1L;
    private final StreamStateHandle delegate;

    BufferedHandle(StreamStateHandle delegate) {
      this.delegate = delegate;
    }

    @Override
    public FSDataInputStream openInputStream() throws IOException {
      return new BufferedInputStream(delegate.openInputStream(), BUFFER_BYTES);
    }

    @Override
    public Optional<byte[]> asBytesIfInMemory() {
      return delegate.asBytesIfInMemory();
    }

    @Override
    public Optional<Path> maybeGetPath() {
      return delegate.maybeGetPath();
    }

    @Override
    public PhysicalStateHandleID getStreamStateHandleID() {
      return delegate.getStreamStateHandleID();
    }

    @Override
    public void discardState() throws Exception {
      delegate.discardState();
    }

    @Override
    public long getStateSize() {
      return delegate.getStateSize();
    }

    @Override
    public void collectSizeStats(StateObjectSizeStatsCollector collector) {
      delegate.collectSizeStats(collector);
    }

    @Override
    public String toString() {
      return "Buffered(" + delegate + ")";
    }
  }

  /**
   * A seekable stream behind a read buffer. A seek inside the buffered window moves within it (the
   * restore seeks to each key group's offset, usually just past where the previous one ended);
   * otherwise it seeks the underlying stream and drops the buffer. Invariant: the underlying stream
   * is at {@code start + limit}.
   */
  static final class BufferedInputStream extends FSDataInputStream {
    private final FSDataInputStream in;
    private final byte[] buf;
    private long start; // stream position of buf[0]
    private int pos; // next byte to hand out
    private int limit; // bytes valid in buf

    BufferedInputStream(FSDataInputStream in, int size) throws IOException {
      if (size <= 0) {
        throw new IllegalArgumentException("buffer size must be positive, not " + size);
      }
      this.in = in;
      this.buf = new byte[size];
      this.start = in.getPos();
    }

    private boolean fill() throws IOException {
      start += limit;
      pos = 0;
      limit = 0;
      int n = in.read(buf, 0, buf.length);
      if (n <= 0) {
        return false;
      }
      limit = n;
      return true;
    }

    @Override
    public int read() throws IOException {
      if (pos == limit && !fill()) {
        return -1;
      }
      return buf[pos++] & 0xff;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
      java.util.Objects.checkFromIndexSize(off, len, b.length);
      if (len == 0) {
        return 0;
      }
      int avail = limit - pos;
      if (avail == 0) {
        if (len >= buf.length) {
          // Large reads skip the copy.
          start += limit;
          pos = 0;
          limit = 0;
          int n = in.read(b, off, len);
          if (n > 0) {
            start += n;
          }
          return n;
        }
        if (!fill()) {
          return -1;
        }
        avail = limit;
      }
      int n = Math.min(avail, len);
      System.arraycopy(buf, pos, b, off, n);
      pos += n;
      return n;
    }

    @Override
    public long skip(long n) throws IOException {
      if (n <= 0) {
        return 0;
      }
      long avail = limit - pos;
      if (n <= avail) {
        pos += (int) n;
        return n;
      }
      long s = in.skip(n - avail);
      start += limit + Math.max(s, 0);
      pos = 0;
      limit = 0;
      return avail + Math.max(s, 0);
    }

    @Override
    public int available() throws IOException {
      return (int) Math.min(Integer.MAX_VALUE, (long) (limit - pos) + in.available());
    }

    @Override
    public void seek(long desired) throws IOException {
      if (desired < 0) {
        throw new IOException("cannot seek to negative position " + desired);
      }
      if (desired >= start && desired <= start + limit) {
        pos = (int) (desired - start);
        return;
      }
      in.seek(desired);
      start = desired;
      pos = 0;
      limit = 0;
    }

    @Override
    public long getPos() {
      return start + pos;
    }

    @Override
    public void close() throws IOException {
      in.close();
    }
  }
}
