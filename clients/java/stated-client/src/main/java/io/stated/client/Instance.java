package io.stated.client;

import com.google.protobuf.ByteString;
import io.grpc.CallOptions;
import io.grpc.ClientCall;
import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.ClientResponseObserver;
import io.grpc.stub.StreamObserver;
import io.stated.api.v1.AwaitSnapshotRequest;
import io.stated.api.v1.BatchRequest;
import io.stated.api.v1.BatchResponse;
import io.stated.api.v1.ChannelChunk;
import io.stated.api.v1.CloseRequest;
import io.stated.api.v1.ConfirmSnapshotRequest;
import io.stated.api.v1.CountEntriesRequest;
import io.stated.api.v1.ForgetSnapshotRequest;
import io.stated.api.v1.ForgetSnapshotResponse;
import io.stated.api.v1.KeyGroupRange;
import io.stated.api.v1.Op;
import io.stated.api.v1.OpType;
import io.stated.api.v1.OpenResponse;
import io.stated.api.v1.ReadChannelStateRequest;
import io.stated.api.v1.ReadChannelStateResponse;
import io.stated.api.v1.RegisterStatesRequest;
import io.stated.api.v1.RegisterStatesResponse;
import io.stated.api.v1.ReleaseViewRequest;
import io.stated.api.v1.Result;
import io.stated.api.v1.ScanKeysRequest;
import io.stated.api.v1.ScanKeysResponse;
import io.stated.api.v1.ScanViewRequest;
import io.stated.api.v1.ScanViewResponse;
import io.stated.api.v1.SnapshotBarrier;
import io.stated.api.v1.SnapshotOutcome;
import io.stated.api.v1.SnapshotResponse;
import io.stated.api.v1.StateDescriptor;
import io.stated.api.v1.TaskCheckpointStats;
import io.stated.api.v1.TaskId;
import io.stated.api.v1.ViewBarrier;
import io.stated.api.v1.ViewInfo;
import io.stated.api.v1.ViewOutcome;
import io.stated.api.v1.WriteChannelStateRequest;
import io.stated.api.v1.WriteChannelStateResponse;
import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.Executor;
import java.util.concurrent.Semaphore;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.locks.ReentrantLock;

/**
 * An open backend instance and its one batch stream.
 *
 * <p>Requests are written at once, without waiting for earlier answers, up to {@link
 * #maxInFlight()} unanswered (then a send waits for a slot: the back-pressure); the daemon applies
 * them in order and answers each in order, which completes its future. {@link #submit} queues
 * single operations into the next request and cuts requests by the daemon's advertised limits.
 * {@link #snapshot} is a barrier: it holds every operation sent or submitted before it and none
 * after, without waiting for any answer.
 *
 * <p>The futures of the batch stream ({@link #send}, {@link #submit}, {@link #snapshot}, {@link
 * #view}) complete on the client's I/O thread, in request order, as soon as the answer is read: a
 * thread waiting for one is woken by the thread that read it, with no hand-off between (a
 * synchronous read is one round trip, and that hand-off was a fifth of it). So a callback chained
 * on them must not block: no waiting for another answer of the daemon, no lock a waiting thread
 * holds. Run such work with an executor ({@code thenApplyAsync(fn, executor)}). A callback that
 * sends on the same instance while every slot is in flight fails at once ({@code
 * FAILED_PRECONDITION}): its thread is the one that would read the answer freeing a slot. The other
 * calls' futures complete on gRPC's executor.
 *
 * <p>If the stream ends (the daemon stopped or restarted, the connection broke), every request in
 * flight and every later one fails with the stream's error; open the instance again (with restore)
 * to go on.
 */
public final class Instance {
  /** The most operations of one request cut by {@link #submit} (the Go client's figure). */
  static final int BATCH_OPS = 1000;

  /** The most operand bytes of one request cut by {@link #submit}. */
  static final int BATCH_BYTES = 1 << 20;

  /**
   * The batch stream's callbacks run on the thread that read the answer (gRPC's transport thread)
   * rather than on gRPC's executor: see the class comment.
   */
  private static final Executor ON_IO_THREAD = Runnable::run;

  private final StatedClient client;
  private final TaskId task;
  private final String job;
  private final ByteString id;
  private final OpenResponse open;
  private final int maxInFlight;
  private final int batchOps;
  private final long batchBytes;

  /** Serializes writes on the stream (and the submit queue), so that send order is seq order. */
  private final ReentrantLock writeLock = new ReentrantLock();

  private final Semaphore slots;
  private final ConcurrentLinkedQueue<Pending> pending = new ConcurrentLinkedQueue<>();
  private volatile StatedException dead;
  private volatile boolean uninterruptible;
  private final AtomicBoolean woken = new AtomicBoolean();

  /** The thread that reads the batch stream's answers (set by the first), or null. */
  private volatile Thread ioThread;

  /** Where requests go: the Batch call, or the batch socket. */
  private BatchOut out;

  private long seq;

  // The request being filled by submit(), guarded by writeLock.
  private final List<Op> queued = new ArrayList<>();
  private final List<CompletableFuture<Result>> queuedFutures = new ArrayList<>();
  private long queuedBytes;

  private static final class Pending {
    final long seq;
    final int n;
    final CompletableFuture<BatchResult> future;

    Pending(long seq, int n, CompletableFuture<BatchResult> future) {
      this.seq = seq;
      this.n = n;
      this.future = future;
    }
  }

  /** The batch stream's sending end. */
  private interface BatchOut {
    /** Writes one request (under the write lock); a failure throws. */
    void send(BatchRequest req);

    /** Ends the requests; the daemon answers those it has, then ends the stream. */
    void complete();

    /** Ends the stream at once. */
    void cancel(String why);

    /** "grpc" or "batch-socket". */
    String transport();
  }

  /** The Batch call's sending end. */
  private static final class GrpcOut implements BatchOut {
    final ClientCallStreamObserver<BatchRequest> call;

    GrpcOut(ClientCallStreamObserver<BatchRequest> call) {
      this.call = call;
    }

    @Override
    public void send(BatchRequest req) {
      call.onNext(req);
    }

    @Override
    public void complete() {
      call.onCompleted();
    }

    @Override
    public void cancel(String why) {
      call.cancel(why, null);
    }

    @Override
    public String transport() {
      return "grpc";
    }
  }

  /** The batch socket's sending end. */
  private static final class SocketOut implements BatchOut {
    final BatchSocket socket;

    SocketOut(BatchSocket socket) {
      this.socket = socket;
    }

    @Override
    public void send(BatchRequest req) {
      socket.send(req);
    }

    @Override
    public void complete() {
      socket.complete();
    }

    @Override
    public void cancel(String why) {
      socket.close();
    }

    @Override
    public String transport() {
      return "batch-socket";
    }
  }

  Instance(StatedClient client, TaskId task, OpenResponse open, int maxInFlight) {
    if (maxInFlight < 1) {
      throw new IllegalArgumentException("maxInFlight " + maxInFlight + " must be at least 1");
    }
    this.client = client;
    this.task = task;
    this.job = task.getJob();
    this.id = open.getInstanceId();
    this.open = open;
    this.maxInFlight = maxInFlight;
    this.slots = new Semaphore(maxInFlight);
    this.batchOps =
        open.getMaxBatchOps() > 0 ? Math.min(BATCH_OPS, open.getMaxBatchOps()) : BATCH_OPS;
    this.batchBytes =
        open.getMaxMessageSize() > 0
            ? Math.min(BATCH_BYTES, open.getMaxMessageSize() / 2)
            : BATCH_BYTES;
  }

  /**
   * Opens the stream and sends the first request, which names the instance: on the batch socket
   * when the daemon names one and the client may use it ({@link StatedClient.Builder#batchSocket}),
   * else (or if it cannot connect) on the Batch call.
   */
  CompletableFuture<BatchResult> start() {
    String path = open.getBatchSocket();
    if (!path.isEmpty() && client.useBatchSocket()) {
      try {
        BatchSocket socket =
            BatchSocket.connect(
                java.nio.file.Path.of(path),
                client.where(),
                StatedClient.MAX_INBOUND,
                "stated-batch-" + task.getOperator() + "-" + task.getSubtask(),
                this::onResponse,
                this::fail);
        out = new SocketOut(socket);
        socket.start();
        return send(List.of(), null, null);
      } catch (java.io.IOException | RuntimeException e) {
        System.getLogger(Instance.class.getName())
            .log(
                System.Logger.Level.WARNING,
                "stated: cannot use the daemon's batch socket "
                    + path
                    + " ("
                    + e
                    + "); the batch stream of "
                    + task.getOperator()
                    + "/"
                    + task.getSubtask()
                    + " goes through gRPC on "
                    + client.where());
      }
    }
    ClientCall<BatchRequest, BatchResponse> call =
        client.channel().newCall(StatedGrpc.BATCH, CallOptions.DEFAULT.withExecutor(ON_IO_THREAD));
    StreamObserver<BatchRequest> obs =
        ClientCalls.asyncBidiStreamingCall(
            call,
            new ClientResponseObserver<BatchRequest, BatchResponse>() {
              @Override
              public void beforeStart(ClientCallStreamObserver<BatchRequest> requestStream) {
                out = new GrpcOut(requestStream);
              }

              @Override
              public void onNext(BatchResponse resp) {
                onResponse(resp);
              }

              @Override
              public void onError(Throwable t) {
                fail(StatedException.from(t, client.where()));
              }

              @Override
              public void onCompleted() {
                fail(
                    new StatedException(
                        Status.Code.UNAVAILABLE, "the daemon ended the batch stream"));
              }
            });
    if (out == null) {
      out = new GrpcOut((ClientCallStreamObserver<BatchRequest>) obs);
    }
    return send(List.of(), null, null);
  }

  public TaskId task() {
    return task;
  }

  public String job() {
    return job;
  }

  public ByteString id() {
    return id;
  }

  /** The daemon's answer to Open: limits, key groups, restored checkpoint. */
  public OpenResponse openResponse() {
    return open;
  }

  /**
   * The revision of the protocol the daemon speaks (OpenResponse.protocol_version; at least {@link
   * StatedClient#MIN_PROTOCOL_VERSION}, or Open failed).
   */
  public int protocolVersion() {
    return open.getProtocolVersion();
  }

  /** The read views the instance may hold at once (OpenResponse.max_views_per_instance). */
  public int maxViews() {
    return open.getMaxViewsPerInstance();
  }

  public int maxParallelism() {
    return open.getMaxParallelism();
  }

  public KeyGroupRange keyGroups() {
    return open.getKeyGroups();
  }

  public int maxInFlight() {
    return maxInFlight;
  }

  StatedClient client() {
    return client;
  }

  /**
   * Takes a read view as a barrier on the stream: it holds every operation sent or submitted before
   * it and none after. Read it with {@link #scanView}, free it with {@link #releaseView}. {@code
   * idleTimeoutMillis} 0: the daemon's default.
   */
  public CompletableFuture<ViewInfo> view(long idleTimeoutMillis) {
    return send(
            List.of(),
            null,
            ViewBarrier.newBuilder().setIdleTimeoutMillis(idleTimeoutMillis).build())
        .thenApply(
            r -> {
              ViewOutcome o = r.view();
              if (o == null) {
                throw new StatedException(
                    Status.Code.INTERNAL, "no view outcome in the response to a view barrier");
              }
              if (o.getCode() != 0) {
                throw StatedException.of(o.getCode(), o.getError());
              }
              return o.getView();
            });
  }

  /**
   * Scans a view: the daemon's pages in scan order (key group, state, key, namespace, user key),
   * fetched as the iterator is read (gRPC flow control bounds what is buffered). {@code req} needs
   * only the view id, range, cursor and page size: the instance and job are filled in. A failure is
   * thrown from the iterator as a {@link StatedException}.
   */
  public Iterator<ScanViewResponse> scanView(ScanViewRequest req) {
    ScanViewRequest full = req.toBuilder().setInstanceId(id).setJob(job).build();
    Iterator<ScanViewResponse> it =
        ClientCalls.blockingServerStreamingCall(
            client.channel(), StatedGrpc.SCAN_VIEW, CallOptions.DEFAULT, full);
    return new Iterator<ScanViewResponse>() {
      @Override
      public boolean hasNext() {
        try {
          return it.hasNext();
        } catch (RuntimeException e) {
          throw StatedException.from(e, client.where());
        }
      }

      @Override
      public ScanViewResponse next() {
        try {
          return it.next();
        } catch (RuntimeException e) {
          throw StatedException.from(e, client.where());
        }
      }
    };
  }

  /** Frees a view ({@code NOT_FOUND} for one already released or timed out). */
  public CompletableFuture<Void> releaseView(ByteString viewId) {
    return client
        .unary(
            StatedGrpc.RELEASE_VIEW,
            ReleaseViewRequest.newBuilder().setInstanceId(id).setJob(job).setViewId(viewId).build())
        .thenApply(r -> (Void) null);
  }

  /**
   * One page of the keys of a state of the live instance. Not ordered with the batch stream: it
   * sees what was answered; flush and wait first for what must be seen.
   */
  public CompletableFuture<ScanKeysResponse> scanKeys(ScanKeysRequest req) {
    return client.unary(
        StatedGrpc.SCAN_KEYS, req.toBuilder().setInstanceId(id).setJob(job).build());
  }

  /** The number of stored entries of {@code state} (empty: all states). */
  public CompletableFuture<Long> countEntries(String state) {
    return client
        .unary(
            StatedGrpc.COUNT_ENTRIES,
            CountEntriesRequest.newBuilder().setInstanceId(id).setJob(job).setState(state).build())
        .thenApply(r -> r.getEntries());
  }

  /** Registers states after Open; requests sent after the answer may use them. */
  public CompletableFuture<RegisterStatesResponse> registerStates(List<StateDescriptor> states) {
    return client.unary(
        StatedGrpc.REGISTER_STATES,
        RegisterStatesRequest.newBuilder()
            .setInstanceId(id)
            .setJob(job)
            .addAllStates(states)
            .build());
  }

  /** A bulk load into this instance; see {@link Loader}. */
  public Loader load() {
    return new Loader(this);
  }

  /**
   * Whether a send that waits for a free slot ignores interrupts (default false: it fails with
   * {@code CANCELLED}). A state backend whose callers expect every state access to complete sets
   * it; the wait stays bounded by the daemon's answers and by the stream's end.
   */
  public Instance uninterruptibleSends(boolean on) {
    this.uninterruptible = on;
    return this;
  }

  /**
   * How the batch stream reaches the daemon: {@code "batch-socket"} or {@code "grpc"} (see {@link
   * #start}).
   */
  public String transport() {
    return out.transport();
  }

  /** The number of requests sent and not answered yet. */
  public int inFlight() {
    return pending.size();
  }

  /** The stream's error once it ended, else null. */
  public StatedException failure() {
    return dead;
  }

  private void onResponse(BatchResponse resp) {
    if (ioThread == null) {
      ioThread = Thread.currentThread();
    }
    Pending p = pending.poll();
    if (p == null || p.seq != resp.getSeq()) {
      fail(
          new StatedException(
              Status.Code.INTERNAL,
              "response "
                  + resp.getSeq()
                  + " does not match the oldest request in flight "
                  + (p == null ? "(none)" : p.seq)));
      if (p != null) {
        p.future.completeExceptionally(dead);
      }
      return;
    }
    slots.release();
    BatchResult r;
    try {
      r = BatchResult.expand(resp, p.n);
    } catch (IllegalStateException e) {
      StatedException err = new StatedException(Status.Code.INTERNAL, e.getMessage());
      p.future.completeExceptionally(err);
      fail(err);
      return;
    }
    p.future.complete(r);
  }

  private void fail(StatedException err) {
    if (dead == null) {
      dead = err;
    }
    if (out instanceof SocketOut) {
      // Nothing more is read: the reader and the connection end.
      out.cancel("failed");
    }
    drain();
    // Wake every sender waiting for a slot, once: they see the failure.
    if (woken.compareAndSet(false, true)) {
      slots.release(Integer.MAX_VALUE / 2);
    }
  }

  private void drain() {
    for (Pending p; (p = pending.poll()) != null; ) {
      p.future.completeExceptionally(dead);
    }
  }

  /**
   * Sends one request with {@code ops} (at most the daemon's max_batch_ops; the daemon refuses a
   * larger request operation by operation) and, if {@code barrier} is not null, a snapshot barrier
   * after them. Waits only for a free in-flight slot. Operations submitted with {@link #submit} and
   * not yet sent go first.
   */
  public CompletableFuture<BatchResult> send(List<Op> ops, SnapshotBarrier barrier) {
    return send(ops, barrier, null);
  }

  /**
   * {@link #send(List, SnapshotBarrier)} with a view barrier as well ({@code view} may be null);
   * see {@link #view}.
   */
  public CompletableFuture<BatchResult> send(
      List<Op> ops, SnapshotBarrier barrier, ViewBarrier view) {
    writeLock.lock();
    try {
      flushLocked();
      return sendLocked(ops, barrier, view);
    } finally {
      writeLock.unlock();
    }
  }

  /** {@link #send(List, SnapshotBarrier)} without a barrier. */
  public CompletableFuture<BatchResult> send(List<Op> ops) {
    return send(ops, null);
  }

  private CompletableFuture<BatchResult> sendLocked(
      List<Op> ops, SnapshotBarrier barrier, ViewBarrier view) {
    return sendLocked(ops, barrier, view, new CompletableFuture<>());
  }

  /**
   * Sends as {@link #sendLocked(List, SnapshotBarrier, ViewBarrier)}, completing {@code f}, whose
   * callbacks the caller put in place before: they then run on the I/O thread, never on the
   * sender's because the answer came first.
   */
  private CompletableFuture<BatchResult> sendLocked(
      List<Op> ops, SnapshotBarrier barrier, ViewBarrier view, CompletableFuture<BatchResult> f) {
    if (dead != null) {
      f.completeExceptionally(dead);
      return f;
    }
    if (Thread.currentThread() == ioThread) {
      // A callback of this stream's futures: waiting here would wait for
      // an answer only this thread can read.
      if (!slots.tryAcquire()) {
        f.completeExceptionally(
            new StatedException(
                Status.Code.FAILED_PRECONDITION,
                "a callback of the batch stream's futures sent a request while all "
                    + maxInFlight
                    + " slots were in flight; it runs on the thread that reads the answers, so"
                    + " it cannot wait for one: run the callback with an executor"));
        return f;
      }
    } else if (uninterruptible) {
      // Bounded all the same: every answer frees a slot, and the stream's
      // end frees them all.
      slots.acquireUninterruptibly();
    } else {
      try {
        slots.acquire();
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        f.completeExceptionally(
            new StatedException(Status.Code.CANCELLED, "interrupted waiting for a batch slot"));
        return f;
      }
    }
    if (dead != null) {
      f.completeExceptionally(dead);
      return f;
    }
    long s = ++seq;
    BatchRequest.Builder req = BatchRequest.newBuilder().setSeq(s).addAllOps(ops);
    if (s == 1) {
      req.setInstanceId(id).setJob(job);
    }
    if (barrier != null) {
      req.setSnapshot(barrier);
    }
    if (view != null) {
      req.setView(view);
    }
    pending.add(new Pending(s, ops.size(), f));
    // A failure between the check above and the add: drain again, so
    // that no future is left behind.
    if (dead != null) {
      drain();
      return f;
    }
    try {
      out.send(req.build());
    } catch (RuntimeException e) {
      fail(StatedException.from(e, client.where()));
    }
    return f;
  }

  /**
   * Queues one operation into the next request and returns its result's future (a failed result
   * completes it exceptionally with the daemon's code and text). The request goes out when it
   * reaches 1000 operations (or the daemon's max_batch_ops) or 1 MiB of operands (or half the
   * daemon's message limit), or on {@link #flush}, {@link #send} or {@link #snapshot}.
   */
  public CompletableFuture<Result> submit(Op op) {
    CompletableFuture<Result> f = new CompletableFuture<>();
    writeLock.lock();
    try {
      long size = op.getSerializedSize();
      if (!queued.isEmpty() && (queued.size() >= batchOps || queuedBytes + size > batchBytes)) {
        flushLocked();
      }
      queued.add(op);
      queuedFutures.add(f);
      queuedBytes += size;
      if (queued.size() >= batchOps) {
        flushLocked();
      }
    } finally {
      writeLock.unlock();
    }
    return f;
  }

  /** Sends the operations queued by {@link #submit}, if any. */
  public void flush() {
    writeLock.lock();
    try {
      flushLocked();
    } finally {
      writeLock.unlock();
    }
  }

  private void flushLocked() {
    if (queued.isEmpty()) {
      return;
    }
    List<Op> ops = new ArrayList<>(queued);
    List<CompletableFuture<Result>> fs = new ArrayList<>(queuedFutures);
    queued.clear();
    queuedFutures.clear();
    queuedBytes = 0;
    CompletableFuture<BatchResult> sent = new CompletableFuture<>();
    sent.whenComplete(
        (r, err) -> {
          for (int i = 0; i < fs.size(); i++) {
            if (err != null) {
              fs.get(i).completeExceptionally(err);
              continue;
            }
            Result x = r.get(i);
            if (x.getCode() != 0) {
              fs.get(i).completeExceptionally(BatchResult.error(x));
            } else {
              fs.get(i).complete(x);
            }
          }
        });
    sendLocked(ops, null, null, sent);
  }

  /**
   * Takes the snapshot of checkpoint {@code checkpointId} as a barrier on the stream: it holds
   * every operation sent or submitted before it. Completes with the daemon's answer, or fails with
   * the barrier's error. {@code wait}: answer once the upload finished (with its sizes); the stream
   * applies nothing else meanwhile. {@code stats} may be null.
   */
  public CompletableFuture<SnapshotResponse> snapshot(
      long checkpointId, boolean wait, TaskCheckpointStats stats) {
    SnapshotBarrier.Builder b =
        SnapshotBarrier.newBuilder().setCheckpointId(checkpointId).setWait(wait);
    if (stats != null) {
      b.setStats(stats);
    }
    return snapshot(b.build());
  }

  /**
   * Sends {@code barrier} (any of its fields) on the stream as in {@link #snapshot(long, boolean,
   * TaskCheckpointStats)}, and completes with the daemon's answer or fails with the barrier's
   * error.
   */
  public CompletableFuture<SnapshotResponse> snapshot(SnapshotBarrier barrier) {
    return send(List.of(), barrier)
        .thenApply(
            r -> {
              SnapshotOutcome o = r.snapshot();
              if (o == null) {
                throw new StatedException(
                    Status.Code.INTERNAL, "no snapshot outcome in the response to a barrier");
              }
              if (o.getCode() != 0) {
                throw StatedException.of(o.getCode(), o.getError());
              }
              return o.getResult();
            });
  }

  /**
   * The synchronous part of a snapshot of an externally owned instance ({@link
   * StatedClient#openExternal}), as a barrier on the stream: completes once the daemon froze the
   * state, while the upload runs in the daemon; {@link #awaitSnapshot} waits for it and returns the
   * files. {@code fullCheckpoint}: reuse no file of an earlier checkpoint (Flink's {@code
   * FULL_CHECKPOINT}, the first checkpoint after a {@code NO_CLAIM} restore). Checkpoint ids are
   * the instance's own: each new for it.
   */
  public CompletableFuture<SnapshotResponse> snapshotExternal(
      long checkpointId, boolean fullCheckpoint) {
    return snapshot(
        SnapshotBarrier.newBuilder()
            .setCheckpointId(checkpointId)
            .setFullCheckpoint(fullCheckpoint)
            .build());
  }

  /**
   * Waits for the upload of checkpoint {@code checkpointId}'s snapshot of this externally owned
   * instance and returns its task handle and files. Call it before {@link #confirmSnapshot}: fails
   * with {@code NOT_FOUND} for a checkpoint the instance did not snapshot, or confirmed or forgot
   * already, and with the upload's error if it failed. Not ordered with the batch stream: send the
   * barrier first ({@link #snapshotExternal}; its future need not be complete).
   */
  public CompletableFuture<OwnedSnapshot> awaitSnapshot(long checkpointId) {
    return client
        .unary(
            StatedGrpc.AWAIT_SNAPSHOT,
            AwaitSnapshotRequest.newBuilder()
                .setInstanceId(id)
                .setJob(job)
                .setCheckpointId(checkpointId)
                .build())
        .thenApply(r -> OwnedSnapshot.of(r.hasSnapshot() ? r.getSnapshot() : null));
  }

  /**
   * Tells the daemon the engine completed checkpoint {@code checkpointId}: later snapshots may
   * reuse its shared files (and no file of a checkpoint not confirmed). Waits for its upload.
   * {@code NOT_FOUND}, naming the checkpoint, for one the instance did not snapshot or forgot.
   */
  public CompletableFuture<Void> confirmSnapshot(long checkpointId) {
    return client
        .unary(
            StatedGrpc.CONFIRM_SNAPSHOT,
            ConfirmSnapshotRequest.newBuilder()
                .setInstanceId(id)
                .setJob(job)
                .setCheckpointId(checkpointId)
                .build())
        .thenApply(r -> (Void) null);
  }

  /**
   * Tells the daemon the engine subsumed or aborted checkpoint {@code checkpointId}: its upload
   * stops if running and no later snapshot reuses its files (the engine may delete them now; the
   * daemon deletes none). Forgetting an unknown checkpoint succeeds, and a snapshot barrier of it
   * sent later (or still queued on the batch stream) is refused.
   */
  public CompletableFuture<Void> forgetSnapshot(long checkpointId) {
    return forget(checkpointId, false).thenApply(r -> (Void) null);
  }

  /**
   * Forgets checkpoint {@code checkpointId}, whose files the engine never got (its task ends while
   * the upload runs, or its own part of the snapshot failed): the daemon stops a running upload,
   * which deletes what it wrote, and waits for that. Completes with the snapshot if its upload had
   * finished first, for the engine to delete the files it does not hold from a completed checkpoint
   * (the list includes reused files); with null otherwise (stopped, failed, or not known). Revision
   * 3.
   */
  public CompletableFuture<OwnedSnapshot> abandonSnapshot(long checkpointId) {
    return forget(checkpointId, true)
        .thenApply(r -> r.hasFinished() ? OwnedSnapshot.of(r.getFinished()) : null);
  }

  private CompletableFuture<ForgetSnapshotResponse> forget(long checkpointId, boolean abandon) {
    return client.unary(
        StatedGrpc.FORGET_SNAPSHOT,
        ForgetSnapshotRequest.newBuilder()
            .setInstanceId(id)
            .setJob(job)
            .setCheckpointId(checkpointId)
            .setAbandon(abandon)
            .build());
  }

  /** {@link #snapshot(long, boolean, TaskCheckpointStats)} without waiting or statistics. */
  public CompletableFuture<SnapshotResponse> snapshot(long checkpointId) {
    return snapshot(checkpointId, false, null);
  }

  /** An operation of {@code type} on {@code state} for {@code key}, with its key group set. */
  public Op.Builder op(OpType type, String state, byte[] key) {
    return Op.newBuilder()
        .setType(type)
        .setState(state)
        .setKey(ByteString.copyFrom(key))
        .setKeyGroup(KeyGroups.keyGroup(key, maxParallelism()));
  }

  /**
   * Streams an unaligned checkpoint's in-flight buffers for {@code checkpointId}, one request per
   * chunk. Call it, and wait for it, before the snapshot barrier of that checkpoint.
   */
  public CompletableFuture<WriteChannelStateResponse> writeChannelState(
      long checkpointId, List<ChannelChunk> chunks) {
    CompletableFuture<WriteChannelStateResponse> f = new CompletableFuture<>();
    StreamObserver<WriteChannelStateRequest> w =
        ClientCalls.asyncClientStreamingCall(
            client.channel().newCall(StatedGrpc.WRITE_CHANNEL_STATE, CallOptions.DEFAULT),
            new StreamObserver<WriteChannelStateResponse>() {
              @Override
              public void onNext(WriteChannelStateResponse v) {
                f.complete(v);
              }

              @Override
              public void onError(Throwable t) {
                f.completeExceptionally(StatedException.from(t, client.where()));
              }

              @Override
              public void onCompleted() {
                if (!f.isDone()) {
                  f.completeExceptionally(
                      new StatedException(
                          Status.Code.INTERNAL, "WriteChannelState returned nothing"));
                }
              }
            });
    w.onNext(
        WriteChannelStateRequest.newBuilder()
            .setInstanceId(id)
            .setJob(job)
            .setCheckpointId(checkpointId)
            .build());
    for (ChannelChunk c : chunks) {
      w.onNext(WriteChannelStateRequest.newBuilder().addChunks(c).build());
    }
    w.onCompleted();
    return f;
  }

  /** The channel state the instance restored, chunk by chunk in stream order. */
  public CompletableFuture<List<ChannelChunk>> readChannelState() {
    CompletableFuture<List<ChannelChunk>> f = new CompletableFuture<>();
    List<ChannelChunk> got = new ArrayList<>();
    ClientCalls.asyncServerStreamingCall(
        client.channel().newCall(StatedGrpc.READ_CHANNEL_STATE, CallOptions.DEFAULT),
        ReadChannelStateRequest.newBuilder().setInstanceId(id).setJob(job).build(),
        new StreamObserver<ReadChannelStateResponse>() {
          @Override
          public void onNext(ReadChannelStateResponse v) {
            got.addAll(v.getChunksList());
          }

          @Override
          public void onError(Throwable t) {
            f.completeExceptionally(StatedException.from(t, client.where()));
          }

          @Override
          public void onCompleted() {
            f.complete(got);
          }
        });
    return f;
  }

  /**
   * Waits for every request sent so far to be answered, ends the stream and closes the instance
   * (CloseInstance): its working state is dropped, checkpoints keep theirs.
   */
  public CompletableFuture<Void> closeInstance() {
    CompletableFuture<BatchResult> last =
        dead == null ? send(List.of(), null) : CompletableFuture.completedFuture(null);
    return last.handle((r, err) -> null)
        .thenCompose(
            x -> {
              endStream(
                  new StatedException(Status.Code.FAILED_PRECONDITION, "the instance was closed"));
              return client
                  .closeInstance(CloseRequest.newBuilder().setInstanceId(id).setJob(job).build())
                  .thenApply(r -> (Void) null);
            });
  }

  /**
   * Ends the stream without closing the instance (it stays open in the daemon, for another stream
   * or until its idle timeout); requests in flight fail with {@code CANCELLED}.
   */
  public void abandon() {
    writeLock.lock();
    try {
      if (dead == null) {
        out.cancel("abandoned by the client");
      }
    } finally {
      writeLock.unlock();
    }
    fail(new StatedException(Status.Code.CANCELLED, "the batch stream was abandoned"));
  }

  private void endStream(StatedException reason) {
    writeLock.lock();
    try {
      if (dead == null) {
        dead = reason;
        out.complete();
      }
    } finally {
      writeLock.unlock();
    }
    fail(reason);
  }
}
