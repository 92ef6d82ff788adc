package io.stated.client;

import com.google.protobuf.ByteString;
import io.grpc.CallOptions;
import io.grpc.Channel;
import io.grpc.ChannelCredentials;
import io.grpc.ClientCall;
import io.grpc.ClientInterceptor;
import io.grpc.ClientInterceptors;
import io.grpc.ForwardingClientCall;
import io.grpc.InsecureChannelCredentials;
import io.grpc.ManagedChannel;
import io.grpc.Metadata;
import io.grpc.MethodDescriptor;
import io.grpc.Status;
import io.grpc.TlsChannelCredentials;
import io.grpc.netty.NettyChannelBuilder;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.StreamObserver;
import io.netty.channel.ChannelOption;
import io.netty.channel.EventLoopGroup;
import io.netty.channel.MultiThreadIoEventLoopGroup;
import io.netty.channel.epoll.Epoll;
import io.netty.channel.epoll.EpollDomainSocketChannel;
import io.netty.channel.epoll.EpollIoHandler;
import io.netty.channel.unix.DomainSocketAddress;
import io.stated.api.v1.AbortCheckpointRequest;
import io.stated.api.v1.AbortCheckpointResponse;
import io.stated.api.v1.AbortReason;
import io.stated.api.v1.CloseRequest;
import io.stated.api.v1.CloseResponse;
import io.stated.api.v1.CompleteCheckpointRequest;
import io.stated.api.v1.CompleteCheckpointResponse;
import io.stated.api.v1.ExternalOwnership;
import io.stated.api.v1.ListCheckpointsRequest;
import io.stated.api.v1.ListCheckpointsResponse;
import io.stated.api.v1.OpenRequest;
import io.stated.api.v1.OpenResponse;
import io.stated.api.v1.PlanRescaleRequest;
import io.stated.api.v1.PlanRescaleResponse;
import io.stated.api.v1.SnapshotRequest;
import io.stated.api.v1.SnapshotResponse;
import io.stated.api.v1.TaskId;
import io.stated.api.v1.TriggerSavepointRequest;
import io.stated.api.v1.TriggerSavepointResponse;
import java.io.File;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * One connection to a stated daemon: the unary calls, and {@link #open} for an {@link Instance}
 * with its batch stream. Thread-safe; one client serves many instances (each uses one HTTP/2
 * stream, the daemon allows 1024 per connection).
 *
 * <pre>{@code
 * try (StatedClient c = StatedClient.unixSocket(Path.of("/var/lib/stated/stated.sock")).build()) {
 *   Instance inst = StatedException.await(c.open(request));
 *   ...
 * }
 * }</pre>
 */
public final class StatedClient implements AutoCloseable {
  /**
   * The receive limit: at least the daemon's max_message_size (16 MiB by default), which the
   * channel must accept before Open says what it is.
   */
  static final int MAX_INBOUND = 64 << 20;

  /** The daemon's HTTP/2 stream window; the connection's is grown to match by grpc-netty. */
  static final int FLOW_WINDOW = 4 << 20;

  private final ManagedChannel managed;
  private final Channel channel;
  private final EventLoopGroup group;
  private final String where;
  private final int maxInFlight;
  private final boolean useBatchSocket;

  private StatedClient(Builder b) throws IOException {
    NettyChannelBuilder nb;
    if (b.socket != null) {
      if (!Epoll.isAvailable()) {
        throw new IOException(
            "Unix sockets need Netty's epoll transport (Linux x86-64), which did not load: "
                + Epoll.unavailabilityCause());
      }
      group = new MultiThreadIoEventLoopGroup(1, EpollIoHandler.newFactory());
      nb =
          NettyChannelBuilder.forAddress(
                  new DomainSocketAddress(b.socket.toString()), InsecureChannelCredentials.create())
              .eventLoopGroup(group)
              .channelType(EpollDomainSocketChannel.class)
              // grpc-netty sets TCP keep-alive on every channel; a domain
              // socket has none (Netty warns on each connect). null unsets it.
              .withOption(ChannelOption.SO_KEEPALIVE, null)
              // A domain socket has no host name; the daemon ignores the authority.
              .overrideAuthority("localhost");
      where = "unix socket " + b.socket;
    } else {
      group = null;
      ChannelCredentials creds;
      if (b.tls) {
        TlsChannelCredentials.Builder tb = TlsChannelCredentials.newBuilder();
        if (b.caFile != null) {
          tb.trustManager(b.caFile.toFile());
        }
        if (b.certFile != null) {
          tb.keyManager(b.certFile.toFile(), b.keyFile.toFile());
        }
        creds = tb.build();
      } else {
        creds = InsecureChannelCredentials.create();
      }
      nb = NettyChannelBuilder.forAddress(b.host, b.port, creds);
      if (b.authority != null) {
        nb.overrideAuthority(b.authority);
      }
      where = (b.tls ? "TLS address " : "address ") + b.host + ":" + b.port;
    }
    nb.maxInboundMessageSize(MAX_INBOUND).flowControlWindow(FLOW_WINDOW);
    managed = nb.build();
    Channel ch = managed;
    if (b.token != null) {
      ch = ClientInterceptors.intercept(ch, new TokenInterceptor(b.token));
    }
    channel = ch;
    maxInFlight = b.maxInFlight;
    useBatchSocket = b.batchSocket && b.socket != null;
  }

  /** A builder for a daemon on a Unix socket (its {@code <data-dir>/stated.sock} by default). */
  public static Builder unixSocket(Path socket) {
    Builder b = new Builder();
    b.socket = Objects.requireNonNull(socket, "socket");
    return b;
  }

  /**
   * A builder for a daemon serving TCP ({@code stated serve --listen}); set {@link Builder#token}
   * and, for a daemon with {@code --tls-cert}, {@link Builder#tls}.
   */
  public static Builder tcp(String host, int port) {
    Builder b = new Builder();
    b.host = Objects.requireNonNull(host, "host");
    b.port = port;
    return b;
  }

  /** Options of a {@link StatedClient}. */
  public static final class Builder {
    private Path socket;
    private String host;
    private int port;
    private boolean tls;
    private Path caFile;
    private Path certFile;
    private Path keyFile;
    private String authority;
    private String token;
    private int maxInFlight = 8;
    private boolean batchSocket = true;

    private Builder() {}

    /**
     * Whether an instance's batch stream uses the daemon's batch socket when the daemon names one
     * (default true; only on a Unix socket, where the daemon names it): the same stream without
     * gRPC, fewer thread hand-offs per round trip (docs/protocol.md, "The batch socket"). If it
     * cannot connect, the stream goes through gRPC and a warning says why.
     */
    public Builder batchSocket(boolean on) {
      this.batchSocket = on;
      return this;
    }

    /**
     * TLS, verifying the daemon's certificate against the PEM bundle {@code caFile} (null: the
     * JVM's trusted authorities).
     */
    public Builder tls(Path caFile) {
      this.tls = true;
      this.caFile = caFile;
      return this;
    }

    /** A client certificate and its key (PEM), for a daemon with {@code --tls-client-ca}. */
    public Builder clientCertificate(Path certFile, Path keyFile) {
      this.certFile = Objects.requireNonNull(certFile, "certFile");
      this.keyFile = Objects.requireNonNull(keyFile, "keyFile");
      return this;
    }

    /** The name the daemon's certificate is checked against (default: the host). */
    public Builder authority(String authority) {
      this.authority = authority;
      return this;
    }

    /** The daemon's {@code --token}, sent as {@code authorization: Bearer <token>}. */
    public Builder token(String token) {
      this.token = token == null || token.isEmpty() ? null : token;
      return this;
    }

    /**
     * The default number of batch requests an instance keeps unanswered on its stream before a send
     * waits (8; the daemon buffers {@code stream_queue_depth}, 4 by default, and a few more keep it
     * busy).
     */
    public Builder maxInFlight(int n) {
      if (n < 1) {
        throw new IllegalArgumentException("maxInFlight " + n + " must be at least 1");
      }
      this.maxInFlight = n;
      return this;
    }

    /** The client. It connects lazily: the first call reports a daemon that is not there. */
    public StatedClient build() throws IOException {
      if (socket == null && (certFile != null || tls) && port <= 0) {
        throw new IllegalArgumentException("a TCP port is required");
      }
      if (socket != null && (tls || token != null)) {
        throw new IllegalArgumentException(
            "TLS and the token are for TCP; a Unix socket is protected by its file mode");
      }
      if (socket == null && (port <= 0 || port > 65535)) {
        throw new IllegalArgumentException("TCP port " + port + " is out of range");
      }
      if (socket == null && certFile != null && !new File(certFile.toString()).canRead()) {
        throw new IllegalArgumentException("cannot read client certificate " + certFile);
      }
      return new StatedClient(this);
    }
  }

  /** Where the daemon is, as error messages name it. */
  public String where() {
    return where;
  }

  /** Whether instances may use the daemon's batch socket ({@link Builder#batchSocket}). */
  boolean useBatchSocket() {
    return useBatchSocket;
  }

  int defaultMaxInFlight() {
    return maxInFlight;
  }

  Channel channel() {
    return channel;
  }

  <Q, R> CompletableFuture<R> unary(MethodDescriptor<Q, R> m, Q req) {
    CompletableFuture<R> f = new CompletableFuture<>();
    ClientCall<Q, R> call = channel.newCall(m, CallOptions.DEFAULT);
    ClientCalls.asyncUnaryCall(
        call,
        req,
        new StreamObserver<R>() {
          @Override
          public void onNext(R value) {
            f.complete(value);
          }

          @Override
          public void onError(Throwable t) {
            f.completeExceptionally(StatedException.from(t, where));
          }

          @Override
          public void onCompleted() {
            if (!f.isDone()) {
              f.completeExceptionally(
                  new StatedException(
                      io.grpc.Status.Code.INTERNAL, m.getFullMethodName() + " returned nothing"));
            }
          }
        });
    return f;
  }

  /**
   * Opens an instance and binds its batch stream (the stream's first request, which names the
   * instance, answered). Completes with the instance, or fails with the daemon's error.
   */
  public CompletableFuture<Instance> open(OpenRequest req) {
    return open(req, maxInFlight);
  }

  /** {@link #open(OpenRequest)} with {@code maxInFlight} unanswered batch requests allowed. */
  public CompletableFuture<Instance> open(OpenRequest req, int maxInFlight) {
    return openRaw(req)
        .exceptionallyCompose(
            t -> CompletableFuture.failedFuture(unimplementedOpen(StatedException.from(t, where))))
        .thenCompose(
            resp -> {
              StatedException old = checkProtocol(resp, req.hasExternal());
              if (old != null) {
                // The daemon opened the instance; it would otherwise stay
                // until its idle timeout, and a new Open would need replace.
                // Best effort: the version is the failure to report.
                return closeInstance(
                        CloseRequest.newBuilder()
                            .setInstanceId(resp.getInstanceId())
                            .setJob(req.getTask().getJob())
                            .build())
                    .handle((r, err) -> (Instance) null)
                    .thenCompose(x -> CompletableFuture.<Instance>failedFuture(old));
              }
              Instance inst = new Instance(this, req.getTask(), resp, maxInFlight);
              return inst.start().thenApply(x -> inst);
            });
  }

  /**
   * The revision of the protocol (stated.v1) this client needs: 1 added read views, key scans, late
   * registration and bulk load, which {@link Instance} uses (stated.proto,
   * OpenResponse.protocol_version).
   */
  public static final int MIN_PROTOCOL_VERSION = 1;

  /**
   * The revision an externally owned instance ({@link #openExternal}) needs: 2 added the mode, 3
   * the abandon of a snapshot ({@link Instance#abandonSnapshot}), without which a task that ends
   * during an upload waits for it to finish or leaves its files behind. A daemon before 2 would
   * ignore {@code OpenRequest.external} and open an instance whose checkpoints it owns itself, so
   * {@link #open} checks it for every request with {@code external} set.
   */
  public static final int EXTERNAL_PROTOCOL_VERSION = 3;

  /**
   * The failure for a daemon whose revision is older than what the request needs ({@link
   * #MIN_PROTOCOL_VERSION}, or {@link #EXTERNAL_PROTOCOL_VERSION} for an externally owned one).
   */
  StatedException checkProtocol(OpenResponse resp, boolean external) {
    int need = external ? EXTERNAL_PROTOCOL_VERSION : MIN_PROTOCOL_VERSION;
    int v = resp.getProtocolVersion();
    if (Integer.compareUnsigned(v, need) >= 0) {
      return null;
    }
    String msg =
        "the stated daemon at "
            + where
            + " speaks protocol revision "
            + Integer.toUnsignedString(v)
            + (v == 0 ? " (it advertises none: a daemon from before revisions)" : "")
            + " of stated.v1, and this client needs revision "
            + need
            + " or later"
            + (external
                ? " for an externally owned instance (OpenRequest.external, and the abandon of"
                    + " a snapshot; a daemon before revision 2 would own its checkpoint files"
                    + " itself)"
                : " (read views, key scans, bulk load)")
            + ": upgrade the daemon to the release of this client";
    return new StatedException(Status.Code.FAILED_PRECONDITION, msg);
  }

  /**
   * Open unimplemented: the daemon serves no stated.v1 (another major version of the protocol, or
   * not stated at all). Other failures are returned as they are.
   */
  private StatedException unimplementedOpen(StatedException e) {
    if (e.code() != Status.Code.UNIMPLEMENTED) {
      return e;
    }
    return new StatedException(
        Status.Code.UNIMPLEMENTED,
        e.daemonMessage(),
        "the server at "
            + where
            + " does not implement stated.v1's Open ("
            + e.daemonMessage()
            + "): it is a stated daemon of another major protocol version, or not stated; run a"
            + " daemon of the release of this client",
        e);
  }

  /**
   * Opens an lsm instance in the externally owned mode (docs/protocol.md, section 11): its
   * checkpoint files go under {@code root} in the daemon's external directory ({@code stated serve
   * --external-dir}) and belong to the engine. Take snapshots with {@link
   * Instance#snapshotExternal}, collect each with {@link Instance#awaitSnapshot}, and tell the
   * daemon what became of it with {@link Instance#confirmSnapshot} and {@link
   * Instance#forgetSnapshot}. {@code restoreHandles} are the {@link OwnedSnapshot#taskHandle}s the
   * engine assigned to the task (after a rescale: those of every old subtask that overlaps its key
   * groups; of any job); empty: a new, empty instance. {@code req} must not set {@code restore} or
   * {@code external}. Fails with the daemon's error ({@code UNIMPLEMENTED} for a daemon without
   * {@code --external-dir}), or {@code FAILED_PRECONDITION} for a daemon older than {@link
   * #EXTERNAL_PROTOCOL_VERSION}.
   */
  public CompletableFuture<Instance> openExternal(
      OpenRequest req, String root, List<ByteString> restoreHandles) {
    Objects.requireNonNull(req, "req");
    Objects.requireNonNull(root, "root");
    Objects.requireNonNull(restoreHandles, "restoreHandles");
    if (req.hasExternal()) {
      throw new IllegalArgumentException(
          "the request sets external already; openExternal sets it from root and the handles");
    }
    ExternalOwnership.Builder ext = ExternalOwnership.newBuilder().setRoot(root);
    for (int i = 0; i < restoreHandles.size(); i++) {
      ext.addRestoreHandles(Objects.requireNonNull(restoreHandles.get(i), "restore handle " + i));
    }
    return open(req.toBuilder().setExternal(ext).build(), maxInFlight);
  }

  /** The Open call alone, without a batch stream. */
  public CompletableFuture<OpenResponse> openRaw(OpenRequest req) {
    return unary(StatedGrpc.OPEN, req);
  }

  /**
   * Attaches a batch stream to an instance opened elsewhere (or an id that may be unknown):
   * completes once the daemon bound the stream.
   */
  public CompletableFuture<Instance> attach(TaskId task, OpenResponse open, int maxInFlight) {
    Instance inst = new Instance(this, task, open, maxInFlight);
    return inst.start().thenApply(x -> inst);
  }

  /** The unary snapshot; see {@link Instance#snapshot} for the barrier, which is preferred. */
  public CompletableFuture<SnapshotResponse> snapshot(SnapshotRequest req) {
    return unary(StatedGrpc.SNAPSHOT, req);
  }

  public CompletableFuture<CompleteCheckpointResponse> completeCheckpoint(
      String job, long checkpointId, TaskId... tasks) {
    CompleteCheckpointRequest.Builder b =
        CompleteCheckpointRequest.newBuilder().setJob(job).setCheckpointId(checkpointId);
    for (TaskId t : tasks) {
      b.addTasks(t);
    }
    return unary(StatedGrpc.COMPLETE_CHECKPOINT, b.build());
  }

  public CompletableFuture<AbortCheckpointResponse> abortCheckpoint(
      String job, long checkpointId, AbortReason code, String reason) {
    return unary(
        StatedGrpc.ABORT_CHECKPOINT,
        AbortCheckpointRequest.newBuilder()
            .setJob(job)
            .setCheckpointId(checkpointId)
            .setReasonCode(code)
            .setReason(reason == null ? "" : reason)
            .build());
  }

  public CompletableFuture<ListCheckpointsResponse> listCheckpoints(String job) {
    return unary(
        StatedGrpc.LIST_CHECKPOINTS, ListCheckpointsRequest.newBuilder().setJob(job).build());
  }

  /**
   * TriggerSavepoint as given. The daemon refuses it unless {@code batches_answered} is set, which
   * states that every batch request of the job's instances was answered (flush them and wait for
   * the last future first), so that the savepoint holds every write sent before it.
   */
  public CompletableFuture<TriggerSavepointResponse> triggerSavepoint(TriggerSavepointRequest req) {
    return unary(StatedGrpc.TRIGGER_SAVEPOINT, req);
  }

  public CompletableFuture<PlanRescaleResponse> planRescale(PlanRescaleRequest req) {
    return unary(StatedGrpc.PLAN_RESCALE, req);
  }

  /** CloseInstance by id; {@link Instance#closeInstance} ends the stream first. */
  public CompletableFuture<CloseResponse> closeInstance(CloseRequest req) {
    return unary(StatedGrpc.CLOSE_INSTANCE, req);
  }

  /**
   * Closes the connection: calls and streams still open fail with {@code UNAVAILABLE} or {@code
   * CANCELLED}. Waits up to 5 seconds for the transport to end.
   */
  @Override
  public void close() {
    managed.shutdownNow();
    try {
      managed.awaitTermination(5, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
    if (group != null) {
      group.shutdownGracefully(0, Duration.ofSeconds(5).toMillis(), TimeUnit.MILLISECONDS);
    }
  }

  /** Adds the daemon's token to every call and stream. */
  private static final class TokenInterceptor implements ClientInterceptor {
    private static final Metadata.Key<String> AUTH =
        Metadata.Key.of("authorization", Metadata.ASCII_STRING_MARSHALLER);
    private final String value;

    TokenInterceptor(String token) {
      this.value = "Bearer " + token;
    }

    @Override
    public <Q, R> ClientCall<Q, R> interceptCall(
        MethodDescriptor<Q, R> method, CallOptions options, Channel next) {
      return new ForwardingClientCall.SimpleForwardingClientCall<Q, R>(
          next.newCall(method, options)) {
        @Override
        public void start(Listener<R> listener, Metadata headers) {
          headers.put(AUTH, value);
          super.start(listener, headers);
        }
      };
    }
  }
}
