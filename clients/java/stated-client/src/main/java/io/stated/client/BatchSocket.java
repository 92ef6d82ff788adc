package io.stated.client;

import com.google.protobuf.CodedOutputStream;
import com.google.rpc.Status;
import io.stated.api.v1.BatchRequest;
import io.stated.api.v1.BatchResponse;
import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.function.Consumer;

/**
 * An instance's batch stream on the daemon's batch socket ({@code OpenResponse.batch_socket};
 * docs/protocol.md, "The batch socket"): the Batch call's messages without gRPC, each framed as
 * gRPC frames a message (a flag byte, the length as 4 bytes big-endian), after a preface; the
 * daemon's last frame is the stream's status.
 *
 * <p>Why: a synchronous read is one round trip, and through gRPC the daemon hands each request
 * between three goroutines (measured, most of its CPU per round trip); on the batch socket it
 * answers a request on the goroutine that read it. This side keeps gRPC's shape: two threads of its
 * own, a writer that writes what senders queue (several requests in one system call when they queue
 * up) and a reader that reads the answers and completes their futures, as Netty's event loop does
 * for the gRPC stream ({@link #write} says why a sender does not write itself). Both threads end
 * with the connection; {@link #close} ends them.
 */
final class BatchSocket {
  /** What a client writes first (api/protocol's BatchSocketPreface). */
  static final byte[] PREFACE = "stated-batch/1\n".getBytes(StandardCharsets.US_ASCII);

  static final byte FRAME_MESSAGE = 0x00;
  static final byte FRAME_STATUS = (byte) 0x80;
  static final int HEADER = 5;

  /** Queued after the last request: the writer ends the requests. */
  private static final ByteBuffer END = ByteBuffer.allocate(0);

  private final Path path;
  private final String where;
  private final SocketChannel ch;
  private final int maxInbound;
  private final Consumer<BatchResponse> onResponse;
  private final Consumer<StatedException> onEnd;
  private final Thread reader;
  private final Thread writer;
  private final java.util.concurrent.LinkedBlockingQueue<ByteBuffer> toWrite =
      new java.util.concurrent.LinkedBlockingQueue<>();
  private volatile IOException writeFailure;
  private volatile boolean closing;

  private BatchSocket(
      Path path,
      String where,
      SocketChannel ch,
      int maxInbound,
      String name,
      Consumer<BatchResponse> onResponse,
      Consumer<StatedException> onEnd) {
    this.path = path;
    this.where = where + " (batch socket " + path + ")";
    this.ch = ch;
    this.maxInbound = maxInbound;
    this.onResponse = onResponse;
    this.onEnd = onEnd;
    this.reader = new Thread(this::read, name + "-reader");
    this.reader.setDaemon(true);
    this.writer = new Thread(this::write, name + "-writer");
    this.writer.setDaemon(true);
  }

  /**
   * Connects and writes the preface; the reader starts with {@link #start}. {@code onResponse} runs
   * on the reader for each answer, in order; {@code onEnd} once, with the stream's end.
   */
  static BatchSocket connect(
      Path path,
      String where,
      int maxInbound,
      String name,
      Consumer<BatchResponse> onResponse,
      Consumer<StatedException> onEnd)
      throws IOException {
    SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
    try {
      ch.connect(UnixDomainSocketAddress.of(path));
      writeFully(ch, ByteBuffer.wrap(PREFACE));
    } catch (IOException | RuntimeException e) {
      ch.close();
      throw e;
    }
    return new BatchSocket(path, where, ch, maxInbound, name, onResponse, onEnd);
  }

  void start() {
    reader.start();
    writer.start();
  }

  /**
   * Queues one request for the writer; the caller holds the instance's write lock, and the
   * instance's in-flight slots bound what is queued. Fails if the writer has failed.
   */
  void send(BatchRequest req) {
    IOException failed = writeFailure;
    if (failed != null) {
      throw unavailable("writing a request: " + describe(failed));
    }
    int n = req.getSerializedSize();
    ByteBuffer b = ByteBuffer.allocate(HEADER + n);
    b.put(FRAME_MESSAGE).putInt(n);
    try {
      CodedOutputStream out = CodedOutputStream.newInstance(b);
      req.writeTo(out);
      out.flush();
    } catch (IOException e) {
      throw new IllegalStateException("encoding a request: " + e.getMessage(), e);
    }
    b.flip();
    toWrite.add(b);
  }

  /**
   * The writer: writes what {@link #send} queued, as much as is queued in one system call. A thread
   * of its own because a channel's write from a thread that is interrupted meanwhile closes the
   * channel, and state accesses come from threads Flink interrupts (its own tests read state from
   * threads they interrupt); only {@link #close} interrupts this one.
   */
  private void write() {
    ByteBuffer[] batch = new ByteBuffer[64];
    try {
      while (true) {
        ByteBuffer first = toWrite.take();
        if (first == END) {
          ch.shutdownOutput();
          return;
        }
        int k = 0;
        batch[k++] = first;
        boolean end = false;
        for (ByteBuffer b; k < batch.length && (b = toWrite.poll()) != null; ) {
          if (b == END) {
            end = true;
            break;
          }
          batch[k++] = b;
        }
        long left = 0;
        for (int i = 0; i < k; i++) {
          left += batch[i].remaining();
        }
        while (left > 0) {
          left -= ch.write(batch, 0, k);
        }
        java.util.Arrays.fill(batch, 0, k, null);
        if (end) {
          ch.shutdownOutput();
          return;
        }
      }
    } catch (IOException e) {
      writeFailure = e;
      close();
    } catch (InterruptedException e) {
      // close(): the connection is closed already.
    }
  }

  /**
   * Ends the requests: the daemon answers those it has, then ends the stream with its status, which
   * ends the reader.
   */
  void complete() {
    toWrite.add(END);
  }

  /** Closes the connection at once; the daemon stops applying what it has not applied. */
  void close() {
    closing = true;
    try {
      ch.close();
    } catch (IOException e) {
      // Closed either way.
    }
    if (Thread.currentThread() != writer) {
      writer.interrupt();
    }
  }

  private static void writeFully(SocketChannel ch, ByteBuffer b) throws IOException {
    while (b.hasRemaining()) {
      ch.write(b);
    }
  }

  /** A lost daemon, named as the gRPC stream's errors name it, with how to start one. */
  private StatedException unavailable(String text) {
    return StatedException.from(
        io.grpc.Status.UNAVAILABLE.withDescription(text).asRuntimeException(), where);
  }

  private static String describe(IOException e) {
    if (e instanceof ClosedChannelException) {
      return "the connection was closed (an interrupt of the writing thread, or the stream's end)";
    }
    return e.getMessage() == null ? e.toString() : e.getMessage();
  }

  /** The reader: frames until the status or the connection's end. */
  private void read() {
    StatedException end;
    try {
      end = readFrames();
    } catch (IOException e) {
      IOException wrote = writeFailure;
      if (wrote != null) {
        end = unavailable("writing a request: " + describe(wrote));
      } else if (closing) {
        end = new StatedException(io.grpc.Status.Code.CANCELLED, "the batch stream was closed");
      } else {
        end = unavailable("reading answers: " + describe(e));
      }
    } catch (RuntimeException e) {
      end =
          new StatedException(
              io.grpc.Status.Code.INTERNAL,
              "reading the batch socket " + path + ": " + e.getMessage());
    }
    close();
    onEnd.accept(end);
  }

  private StatedException readFrames() throws IOException {
    ByteBuffer buf = ByteBuffer.allocate(64 << 10);
    buf.flip();
    while (true) {
      if (!fill(buf, HEADER)) {
        return unavailable(
            "the daemon closed the connection"
                + (buf.hasRemaining() ? " inside a frame" : "")
                + " without ending the stream (it stopped or restarted?)");
      }
      byte flag = buf.get();
      long n = Integer.toUnsignedLong(buf.getInt());
      if (n > maxInbound) {
        throw new IllegalStateException(
            "an answer of " + n + " bytes is over the client's limit of " + maxInbound);
      }
      int len = (int) n;
      if (buf.capacity() < len) {
        ByteBuffer bigger = ByteBuffer.allocate(len);
        bigger.put(buf);
        bigger.flip();
        buf = bigger;
      }
      if (!fill(buf, len)) {
        return unavailable("the daemon closed the connection inside a frame");
      }
      int at = buf.position();
      buf.position(at + len);
      if (flag == FRAME_MESSAGE) {
        // Parsing copies bytes fields (no aliasing): buf is reused.
        onResponse.accept(BatchResponse.parser().parseFrom(buf.array(), at, len));
      } else if (flag == FRAME_STATUS) {
        Status st = Status.parser().parseFrom(buf.array(), at, len);
        if (st.getCode() == 0) {
          return new StatedException(
              io.grpc.Status.Code.UNAVAILABLE, "the daemon ended the batch stream");
        }
        // As the Batch call's status would be (an UNAVAILABLE names the daemon).
        return StatedException.from(
            io.grpc.Status.fromCodeValue(st.getCode())
                .withDescription(st.getMessage())
                .asRuntimeException(),
            where);
      } else {
        throw new IllegalStateException(
            "frame flag 0x" + Integer.toHexString(flag & 0xff) + " from the daemon");
      }
    }
  }

  /**
   * Makes {@code buf} (in read mode) hold at least {@code n} bytes, reading as needed; false at the
   * connection's end first.
   */
  private boolean fill(ByteBuffer buf, int n) throws IOException {
    if (buf.remaining() >= n) {
      return true;
    }
    if (buf.capacity() - buf.position() < n) {
      buf.compact();
      buf.flip();
    }
    while (buf.remaining() < n) {
      int pos = buf.position();
      int lim = buf.limit();
      buf.position(lim);
      buf.limit(buf.capacity());
      int r = ch.read(buf);
      buf.limit(buf.position());
      buf.position(pos);
      if (r < 0) {
        return false;
      }
    }
    return true;
  }
}
