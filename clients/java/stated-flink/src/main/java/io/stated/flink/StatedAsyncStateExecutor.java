package io.stated.flink;

import com.google.protobuf.ByteString;
import com.google.protobuf.UnsafeByteOperations;
import io.stated.api.v1.MapEntry;
import io.stated.api.v1.Op;
import io.stated.api.v1.OpType;
import io.stated.api.v1.Result;
import io.stated.client.BatchResult;
import io.stated.client.Instance;
import io.stated.client.StatedException;
import java.io.IOException;
import java.util.AbstractMap;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.core.memory.DataOutputSerializer;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Histogram;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.runtime.asyncprocessing.AsyncRequestContainer;
import org.apache.flink.runtime.asyncprocessing.StateExecutor;
import org.apache.flink.runtime.asyncprocessing.StateRequest;
import org.apache.flink.runtime.asyncprocessing.StateRequestHandler;
import org.apache.flink.runtime.asyncprocessing.StateRequestType;
import org.apache.flink.runtime.metrics.DescriptiveStatisticsHistogram;
import org.apache.flink.runtime.state.v2.AbstractKeyedState;

/**
 * Executes Flink's batches of state requests on the daemon: each batch becomes one stated batch
 * request (cut only where the daemon's per-request limits demand it), sent on the task thread in
 * request order, so the daemon applies a key's requests in the order Flink issued them and a view
 * barrier taken later (a snapshot) holds all of them. The answer completes Flink's futures, on the
 * client's response thread; Flink moves the callbacks to the task's mailbox.
 *
 * <p>Requests are translated on the task thread (keys, namespaces and values serialized there);
 * answers are decoded with each state's thread-local serializer copies.
 *
 * <p>Writes complete when they are sent, not when the daemon answers (write-behind): a request that
 * returns nothing (a value update, reducing or aggregating add, list add or update, map put or
 * remove, clear) cannot be read before a later request of the same key, which goes out after it on
 * the same stream and so sees it, and a snapshot's barrier goes after it too. An operator's chain
 * of state steps then waits for the daemon's answers only at its reads: the benchmark's three reads
 * and three writes per event wait for three round trips, not six (each step still waits in Flink's
 * buffer for its batch to be sent). A write the daemon refuses (a value over its --max-value-size,
 * a daemon that fails) can no longer fail its own future, so it fails the executor: every later
 * request fails with the daemon's text, and so does the next snapshot ({@link #awaitWrites}), which
 * waits for the answers of every batch sent before it, so that no checkpoint completes without a
 * write that was acknowledged to Flink.
 *
 * <p>With the value cache on ({@link AsyncValueCache}), writes of value-like states complete when
 * cached and reach the daemon when their entry is evicted (sent right after the request that
 * evicted it, before any later one) or flushed ({@link #flushWrites}: before a snapshot's barrier,
 * before a state is registered again); a refusal then fails the executor as above. A get the cache
 * answers completes when its batch is sent: the cache holds every write translated before it, so
 * its answer needs nothing of the daemon's. A hot key's chain of a get and an update then waits for
 * no round trip, and its writes between two checkpoints cost the daemon one put.
 */
final class StatedAsyncStateExecutor implements StateExecutor {
  /** The page size of a map iteration (MAP_ITERATE's limit), as the synchronous map state. */
  static final int MAP_PAGE = StatedMapState.PAGE;

  /** The window of the round-trip histogram: the last this many batches. */
  static final int ROUND_TRIPS = 10_000;

  /** Metric names, in the operator's metric group (docs/flink.md, "Asynchronous state"). */
  static final String METRIC_BATCHES = "statedAsyncBatches";

  static final String METRIC_OPERATIONS = "statedAsyncOperations";
  static final String METRIC_ROUND_TRIP = "statedAsyncBatchRoundTripMicros";
  static final String METRIC_NEW_KEY_ANSWERS = "statedAsyncNewKeyAnswers";

  private final Instance inst;
  private final TypeSerializer<Object> keySerializer;
  private final java.util.function.Supplier<StateRequestHandler> handler;
  private final int maxOps;
  private final long maxBytes;
  private final DataOutputSerializer out = new DataOutputSerializer(128);
  private long sentOps;
  private long mergedReads;

  /**
   * Metrics in the operator's group: batches and operations sent, and each batch's round trip (send
   * to answer, in µs; what a chain of state steps waits per read).
   */
  private final Counter batchesMetric;

  private final Counter opsMetric;
  private final Counter newKeyMetric;
  private final Histogram roundTripMetric;
  private final AsyncValueCache cache;

  /** The addresses written to states registered fresh (a read of any other is an absence). */
  private final WrittenFilter written;

  /**
   * The first write the daemon refused after it had completed (write-behind), or null; set on the
   * client's response thread, read on the task thread.
   */
  private volatile Exception writeFailure;

  /** The answers of the last batch sent (batches are answered in order); the task thread's. */
  private CompletableFuture<Void> lastAnswered = CompletableFuture.completedFuture(null);

  @SuppressWarnings("unchecked")
  StatedAsyncStateExecutor(
      Instance inst,
      TypeSerializer<?> keySerializer,
      java.util.function.Supplier<StateRequestHandler> handler,
      long cacheBytes,
      WrittenFilter written,
      MetricGroup metrics) {
    this.inst = inst;
    this.written = written;
    this.newKeyMetric = metrics.counter(METRIC_NEW_KEY_ANSWERS);
    this.batchesMetric = metrics.counter(METRIC_BATCHES);
    this.opsMetric = metrics.counter(METRIC_OPERATIONS);
    this.roundTripMetric =
        metrics.histogram(METRIC_ROUND_TRIP, new DescriptiveStatisticsHistogram(ROUND_TRIPS));
    this.cache = new AsyncValueCache(cacheBytes);
    this.keySerializer = (TypeSerializer<Object>) keySerializer.duplicate();
    this.handler = handler;
    int ops = inst.openResponse().getMaxBatchOps();
    this.maxOps = ops > 0 ? Math.min(1000, ops) : 1000;
    long msg = inst.openResponse().getMaxMessageSize();
    this.maxBytes = msg > 0 ? Math.min(1 << 20, msg / 2) : 1 << 20;
  }

  /** The requests of one batch, in Flink's order. */
  static final class Batch implements AsyncRequestContainer<StateRequest<?, ?, ?, ?>> {
    final List<StateRequest<?, ?, ?, ?>> requests = new ArrayList<>();

    @Override
    public void offer(StateRequest<?, ?, ?, ?> r) {
      requests.add(r);
    }

    @Override
    public boolean isEmpty() {
      return requests.isEmpty();
    }
  }

  @Override
  public AsyncRequestContainer<StateRequest<?, ?, ?, ?>> createRequestContainer() {
    return new Batch();
  }

  @Override
  public boolean fullyLoaded() {
    return inst.inFlight() >= inst.maxInFlight();
  }

  @Override
  public void executeRequestSync(StateRequest<?, ?, ?, ?> request) {
    Batch b = new Batch();
    b.offer(request);
    executeBatchRequests(b);
  }

  @Override
  public void shutdown() {
    // The instance belongs to the backend, which closes it.
  }

  /** The filter of written addresses (tests). */
  WrittenFilter written() {
    return written;
  }

  /** The cache of the value-like states (tests). */
  AsyncValueCache cache() {
    return cache;
  }

  /** Operations sent to the daemon so far (tests; the task thread's count). */
  long sentOps() {
    return sentOps;
  }

  /** Requests answered by an earlier identical read of their batch (tests). */
  long mergedReads() {
    return mergedReads;
  }

  /**
   * Finds the reads of one batch that an earlier read of the same batch already answers: the same
   * operation (state, key group, key, namespace, user key, limit) with no write to that state, key
   * and namespace between them. The daemon applies a batch's operations in order, so the earlier
   * read's result is what the later one would get: N gets of one key become one operation, and a
   * put between two gets still shows in the second. Each merged request decodes its own copy of the
   * value from the shared result.
   */
  private static final class ReadMerger {
    /** Per address, the reads since its last write: operation to its index in the batch. */
    private final Map<AsyncValueCache.Address, Map<Op, Integer>> reads = new HashMap<>();

    /**
     * Notes {@code op} at {@code index}; returns the index of an earlier identical read that
     * answers it, or -1 when it must be sent.
     */
    int offer(Op op, int index) {
      switch (op.getType()) {
        case OP_TYPE_GET:
        case OP_TYPE_LIST_GET:
        case OP_TYPE_MAP_GET:
        case OP_TYPE_MAP_CONTAINS:
        case OP_TYPE_MAP_ITERATE:
          {
            Integer earlier =
                reads.computeIfAbsent(address(op), a -> new HashMap<>()).putIfAbsent(op, index);
            return earlier == null ? -1 : earlier;
          }
        case OP_TYPE_PUT:
        case OP_TYPE_DELETE:
        case OP_TYPE_LIST_APPEND:
        case OP_TYPE_MAP_PUT:
        case OP_TYPE_MAP_REMOVE:
          reads.remove(address(op));
          return -1;
        default:
          // An operation this does not know to touch only its own address.
          reads.clear();
          return -1;
      }
    }
  }

  /** Decodes the answer of one request from its operations' results. */
  private interface Decoder {
    Object decode(List<Result> results, int from, int to) throws Exception;
  }

  /**
   * The answer of a get from the value cache: known when the request is translated, so it completes
   * when its batch is sent, as a write does, not when the daemon answers the batch.
   */
  private record CachedAnswer(Decoder value) implements Decoder {
    @Override
    public Object decode(List<Result> results, int from, int to) throws Exception {
      return value.decode(results, from, to);
    }
  }

  /** One translated request: its operations are results [from, to) of the batch. */
  private static final class Translated {
    final StateRequest<?, ?, ?, ?> request;
    final int from;
    final int to;
    final Decoder decoder;

    Translated(StateRequest<?, ?, ?, ?> request, int from, int to, Decoder decoder) {
      this.request = request;
      this.from = from;
      this.to = to;
      this.decoder = decoder;
    }
  }

  private static final Decoder NOTHING = (rs, from, to) -> null;

  /** The daemon's answer to a read of an address that holds nothing. */
  private static final List<Result> ABSENT = List.of(Result.getDefaultInstance());

  /**
   * A read of the address: the operation {@code op} makes is sent and {@code d} decodes its result,
   * unless the filter of written addresses knows the address holds nothing; then no operation is
   * made, and {@code d} decodes the daemon's answer for an empty address when the batch is sent.
   */
  private Decoder sendRead(
      List<Op> ops,
      StatedAsyncStates.Addressed s,
      byte[] key,
      byte[] ns,
      java.util.function.Supplier<Op> op,
      Decoder d) {
    if (written.knownAbsent(s.newKeysFiltered(), s.stateName(), key, ns)) {
      newKeyMetric.inc();
      return new CachedAnswer((rs, from, to) -> d.decode(ABSENT, 0, 1));
    }
    ops.add(op.get());
    return d;
  }

  @Override
  public CompletableFuture<Void> executeBatchRequests(
      AsyncRequestContainer<StateRequest<?, ?, ?, ?>> container) {
    List<StateRequest<?, ?, ?, ?>> requests = ((Batch) container).requests;
    Exception failed = writeFailure;
    if (failed != null) {
      for (StateRequest<?, ?, ?, ?> r : requests) {
        fail(r, "an earlier write failed, so no state request is sent", failed);
      }
      return CompletableFuture.completedFuture(null);
    }
    List<Op> ops = new ArrayList<>(requests.size());
    List<Translated> done = new ArrayList<>(requests.size());
    ReadMerger reads = new ReadMerger();
    // Indexes in ops of the dirty entries written back (evicted) in this batch.
    List<Integer> writeBacks = new ArrayList<>();
    List<AsyncValueCache.WriteBack> evicted = new ArrayList<>();
    for (StateRequest<?, ?, ?, ?> r : requests) {
      int from = ops.size();
      try {
        Decoder d = translate(r, ops);
        int to = ops.size();
        int earlier = to - from == 1 ? reads.offer(ops.get(from), from) : -1;
        if (earlier >= 0) {
          // The same read, with no write to its state, key and namespace since:
          // answered by the earlier operation's result.
          ops.remove(from);
          mergedReads++;
          done.add(new Translated(r, earlier, earlier + 1, d));
          continue;
        }
        for (int i = from; to - from > 1 && i < to; i++) {
          reads.offer(ops.get(i), i);
        }
        done.add(new Translated(r, from, to, d));
      } catch (RuntimeException e) {
        // Nothing of this request was sent: drop its operations.
        while (ops.size() > from) {
          ops.remove(ops.size() - 1);
        }
        fail(r, "cannot send " + r.getRequestType() + " of a stated state", e);
      }
      if (cache.enabled()) {
        // Dirty entries this request's write pushed out go right after it,
        // before any later request of theirs (AsyncValueCache).
        evicted.clear();
        cache.evict(evicted);
        for (AsyncValueCache.WriteBack w : evicted) {
          Op op = writeBackOp(w);
          reads.offer(op, ops.size());
          writeBacks.add(ops.size());
          ops.add(op);
        }
      }
    }
    long sentAt = System.nanoTime();
    List<CompletableFuture<BatchResult>> parts = send(ops);
    // Write-behind (the class comment): what returns nothing completes now,
    // and so does a get the cache answered: the cache holds every write
    // translated before it, and it needs nothing from the daemon. A hot key's
    // chain of requests then waits for no round trip at all.
    for (Translated t : done) {
      if (t.decoder == NOTHING) {
        t.request.getFuture().complete(null);
      } else if (t.decoder instanceof CachedAnswer) {
        complete(t, List.of(), null);
      }
    }
    CompletableFuture<Void> answered =
        CompletableFuture.allOf(parts.toArray(new CompletableFuture<?>[0]))
            .handle(
                (v, err) -> {
                  if (!parts.isEmpty()) {
                    // From the send to the last answer, on the response thread.
                    roundTripMetric.update((System.nanoTime() - sentAt) / 1000);
                  }
                  List<Result> results = results(parts, err, ops.size());
                  for (Translated t : done) {
                    if (!(t.decoder instanceof CachedAnswer)) {
                      complete(t, results, err);
                    }
                  }
                  writtenBack(ops, writeBacks, results, err);
                  return null;
                });
    if (!parts.isEmpty()) {
      // A batch that sent nothing (cache hits, cached writes) is answered
      // now; the last one sent may still be in flight, and awaitWrites
      // must wait for it.
      lastAnswered = answered;
    }
    return answered;
  }

  /**
   * Sends {@code ops} in as few batch requests as the daemon's limits allow, in order; the futures
   * of their answers.
   */
  private List<CompletableFuture<BatchResult>> send(List<Op> ops) {
    sentOps += ops.size();
    opsMetric.inc(ops.size());
    List<CompletableFuture<BatchResult>> parts = new ArrayList<>();
    int start = 0;
    long bytes = 0;
    for (int i = 0; i < ops.size(); i++) {
      long size = ops.get(i).getSerializedSize();
      if (i > start && (i - start >= maxOps || bytes + size > maxBytes)) {
        parts.add(inst.send(ops.subList(start, i)));
        start = i;
        bytes = 0;
      }
      bytes += size;
    }
    if (start < ops.size()) {
      parts.add(inst.send(ops.subList(start, ops.size())));
    }
    batchesMetric.inc(parts.size());
    return parts;
  }

  /** The answers of {@code parts}, in order; none when the batch failed ({@code err}). */
  private static List<Result> results(
      List<CompletableFuture<BatchResult>> parts, Throwable err, int size) {
    List<Result> results = new ArrayList<>(size);
    if (err == null) {
      for (CompletableFuture<BatchResult> p : parts) {
        results.addAll(p.join().results());
      }
    }
    return results;
  }

  private static Op writeBackOp(AsyncValueCache.WriteBack w) {
    AsyncValueCache.Address a = w.address();
    return writeOp(a.state(), a.keyGroup(), a.key(), a.namespace(), w.value());
  }

  /** Waits for the daemon's answers to every batch sent so far. */
  void awaitAnswers() {
    try {
      lastAnswered.join();
    } catch (RuntimeException e) {
      // complete() and writtenBack() record every failure; nothing else throws.
    }
  }

  /**
   * Sends the value cache's dirty entries (all, or those of {@code state} when not null) to the
   * daemon, in one or more batches after everything sent so far: before a snapshot's barrier, and
   * before a state is registered again. On the task thread. A refusal fails the executor, as a
   * refused write does ({@link #awaitWrites} reports it).
   */
  void flushWrites(String state) {
    List<AsyncValueCache.WriteBack> dirty = cache.takeDirty(state);
    if (dirty.isEmpty()) {
      return;
    }
    List<Op> ops = new ArrayList<>(dirty.size());
    List<Integer> all = new ArrayList<>(dirty.size());
    for (AsyncValueCache.WriteBack w : dirty) {
      all.add(ops.size());
      ops.add(writeBackOp(w));
    }
    List<CompletableFuture<BatchResult>> parts = send(ops);
    lastAnswered =
        CompletableFuture.allOf(parts.toArray(new CompletableFuture<?>[0]))
            .handle(
                (v, err) -> {
                  List<Result> results = results(parts, err, ops.size());
                  writtenBack(ops, all, results, err);
                  return null;
                });
  }

  /**
   * Reports a refusal of a dirty entry's write ({@code ops} at {@code at}): it completed long
   * before (it is in the cache), so the executor fails from now on.
   */
  private void writtenBack(List<Op> ops, List<Integer> at, List<Result> results, Throwable err) {
    for (int i : at) {
      StatedException e =
          err != null ? StatedException.from(err, null) : BatchResult.error(results.get(i));
      if (e != null && writeFailure == null) {
        writeFailure =
            new IOException(
                "the stated daemon refused the write of state "
                    + ops.get(i).getState()
                    + " that the asynchronous value cache held (writes complete when cached); the"
                    + " task must restore from its last checkpoint: "
                    + e.getMessage(),
                e);
      }
    }
  }

  /**
   * Sends the value cache's dirty entries, waits for the daemon's answers to every batch sent so
   * far and throws if a write among them (or any write before) was refused. On the task thread,
   * before a snapshot's barrier: a checkpoint must not complete without a write Flink saw complete.
   */
  void awaitWrites() throws IOException {
    flushWrites(null);
    awaitAnswers();
    Exception e = writeFailure;
    if (e != null) {
      throw new IOException("no snapshot: " + e.getMessage(), e);
    }
  }

  @SuppressWarnings({"unchecked", "rawtypes"})
  private void complete(Translated t, List<Result> results, Throwable err) {
    StatedException e = err != null ? StatedException.from(err, null) : null;
    for (int i = t.from; e == null && i < t.to; i++) {
      e = BatchResult.error(results.get(i));
    }
    if (t.decoder == NOTHING) {
      // A write, completed when sent: only a refusal is left to report.
      if (e != null) {
        refused(t, e);
      }
      return;
    }
    if (e != null) {
      fail(
          t.request,
          err != null
              ? "the stated daemon failed a batch"
              : "the stated daemon failed " + t.request.getRequestType(),
          e);
      return;
    }
    Object value;
    try {
      value = t.decoder.decode(results, t.from, t.to);
    } catch (Exception x) {
      fail(t.request, "cannot read the answer to " + t.request.getRequestType(), x);
      return;
    }
    ((StateRequest) t.request).getFuture().complete(value);
  }

  /** A write that completed when sent was refused: the executor fails from now on. */
  private void refused(Translated t, StatedException e) {
    if (writeFailure != null) {
      return;
    }
    Object state = t.request.getState();
    String name =
        state instanceof StatedAsyncStates.Addressed
            ? ((StatedAsyncStates.Addressed) state).stateName()
            : String.valueOf(state);
    writeFailure =
        new IOException(
            "the stated daemon refused "
                + t.request.getRequestType()
                + " of state "
                + name
                + " after it had completed (writes complete when sent); the task must restore"
                + " from its last checkpoint: "
                + e.getMessage(),
            e);
  }

  private static void fail(StateRequest<?, ?, ?, ?> r, String what, Throwable e) {
    r.getFuture().completeExceptionally(what + ": " + e.getMessage(), e);
  }

  private byte[] keyBytes(StateRequest<?, ?, ?, ?> r) {
    out.clear();
    try {
      keySerializer.serialize(r.getRecordContext().getKey(), out);
    } catch (IOException e) {
      throw new IllegalStateException("cannot serialize key " + r.getRecordContext().getKey(), e);
    }
    return out.getCopyOfBuffer();
  }

  /** {@code v} serialized into a new array (which callers wrap in a ByteString, uncopied). */
  private <T> byte[] bytes(TypeSerializer<T> s, T v, String state) {
    out.clear();
    try {
      s.serialize(v, out);
    } catch (IOException e) {
      throw new IllegalStateException("cannot serialize a value of state " + state + ": " + e, e);
    }
    return out.getCopyOfBuffer();
  }

  /**
   * A map's user value as the synchronous map state stores it: a null flag, then the value; a new
   * array.
   */
  private <T> byte[] userValue(TypeSerializer<T> s, T v, String state) {
    out.clear();
    try {
      out.writeBoolean(v == null);
      if (v != null) {
        s.serialize(v, out);
      }
    } catch (IOException e) {
      throw new IllegalStateException("cannot serialize a value of state " + state + ": " + e, e);
    }
    return out.getCopyOfBuffer();
  }

  private static <T> T read(TypeSerializer<T> s, ByteString b) throws IOException {
    return s.deserialize(new DataInputDeserializer(b.toByteArray()));
  }

  private static AsyncValueCache.Address address(Op op) {
    return new AsyncValueCache.Address(
        op.getState(), op.getKeyGroup(), op.getKey(), op.getNamespace());
  }

  /** A PUT of {@code v} at the address, or a DELETE when {@code v} is null. */
  private static Op writeOp(String state, int kg, byte[] key, byte[] ns, ByteString v) {
    if (v == null) {
      return op(OpType.OP_TYPE_DELETE, state, kg, key, ns);
    }
    return opBuilder(OpType.OP_TYPE_PUT, state, kg, key, ns).setValue(v).build();
  }

  private static Op op(OpType t, String state, int kg, byte[] key, byte[] ns) {
    return opBuilder(t, state, kg, key, ns).build();
  }

  /**
   * An operation at the address. The key and namespace arrays are wrapped, not copied: every caller
   * passes arrays made for it and never written again (a key serialized per request, a namespace
   * cached as it was serialized).
   */
  private static Op.Builder opBuilder(OpType t, String state, int kg, byte[] key, byte[] ns) {
    return Op.newBuilder()
        .setType(t)
        .setState(state)
        .setKeyGroup(kg)
        .setKey(UnsafeByteOperations.unsafeWrap(key))
        .setNamespace(UnsafeByteOperations.unsafeWrap(ns));
  }

  /** Appends the request's operations to {@code ops} and returns how to decode its answer. */
  @SuppressWarnings({"unchecked", "rawtypes"})
  private Decoder translate(StateRequest<?, ?, ?, ?> r, List<Op> ops) {
    StateRequestType type = r.getRequestType();
    if (type == StateRequestType.SYNC_POINT) {
      return NOTHING;
    }
    if (!(r.getState() instanceof StatedAsyncStates.Addressed)) {
      throw new IllegalArgumentException(
          "state " + r.getState() + " does not belong to the stated backend");
    }
    StatedAsyncStates.Addressed s = (StatedAsyncStates.Addressed) r.getState();
    AbstractKeyedState<?, ?, Object> ks = (AbstractKeyedState<?, ?, Object>) r.getState();
    String name = s.stateName();
    Object payload = r.getPayload();
    if (type == StateRequestType.ITERATOR_LOADING) {
      StatedAsyncStates.MapCursor c = (StatedAsyncStates.MapCursor) payload;
      return mapPage(ops, (StatedAsyncStates.MapS) s, c);
    }
    int kg = r.getRecordContext().getKeyGroup();
    byte[] key = keyBytes(r);
    byte[] ns = s.namespaceBytes(r.getNamespace());
    // Value, reducing and aggregating state go through the cache: every
    // write is stored there as it is sent, a get of a cached address sends
    // nothing (AsyncValueCache).
    boolean cached =
        cache.enabled()
            && (s instanceof StatedAsyncStates.Value
                || s instanceof StatedAsyncStates.Reducing
                || s instanceof StatedAsyncStates.Aggregating);
    switch (type) {
      case CLEAR:
        {
          // Cached: written back later (the class comment); else sent now.
          if (!cached || !cache.write(new AsyncValueCache.Address(name, kg, key, ns), null)) {
            ops.add(op(OpType.OP_TYPE_DELETE, name, kg, key, ns));
          }
          return NOTHING;
        }
      case VALUE_GET:
      case REDUCING_GET:
      case AGGREGATING_GET:
        {
          AsyncValueCache.Address a =
              cached ? new AsyncValueCache.Address(name, kg, key, ns) : null;
          AsyncValueCache.Lookup l = cached ? cache.lookup(a) : null;
          if (l != null && l.hit) {
            ByteString v = l.value;
            return new CachedAnswer(
                (rs, from, to) -> v == null ? null : read(ks.getValueSerializer(), v));
          }
          return sendRead(
              ops,
              s,
              key,
              ns,
              () -> op(OpType.OP_TYPE_GET, name, kg, key, ns),
              (rs, from, to) -> {
                Result x = rs.get(from);
                if (l != null) {
                  cache.fill(a, l.ticket, x.getFound() ? x.getValue() : null);
                }
                return x.getFound() ? read(ks.getValueSerializer(), x.getValue()) : null;
              });
        }
      case VALUE_UPDATE:
      case REDUCING_ADD:
      case AGGREGATING_ADD:
        {
          ByteString v =
              payload == null
                  ? null
                  : UnsafeByteOperations.unsafeWrap(bytes(ks.getValueSerializer(), payload, name));
          if (v != null) {
            written.written(s.newKeysFiltered(), name, key, ns);
          }
          if (!cached || !cache.write(new AsyncValueCache.Address(name, kg, key, ns), v)) {
            ops.add(writeOp(name, kg, key, ns, v));
          }
          return NOTHING;
        }
      case LIST_GET:
        return sendRead(
            ops,
            s,
            key,
            ns,
            () -> op(OpType.OP_TYPE_LIST_GET, name, kg, key, ns),
            (rs, from, to) -> {
              Result x = rs.get(from);
              TypeSerializer<Object> el = ks.getValueSerializer();
              List<Object> items = new ArrayList<>(x.getValuesCount());
              for (ByteString b : x.getValuesList()) {
                items.add(read(el, b));
              }
              return new StatedAsyncStates.WholeList<>(r.getState(), handler.get(), items);
            });
      case LIST_ADD:
        if (payload == null) {
          throw new NullPointerException("You cannot add null to a ListState.");
        }
        ops.add(append(name, kg, key, ns, List.of(payload), ks.getValueSerializer()));
        written.written(s.newKeysFiltered(), name, key, ns);
        return NOTHING;
      case LIST_ADD_ALL:
      case LIST_UPDATE:
        {
          if (payload == null) {
            throw new NullPointerException("List of values to add cannot be null.");
          }
          Collection<Object> values = (Collection<Object>) payload;
          Op add =
              values.isEmpty() ? null : append(name, kg, key, ns, values, ks.getValueSerializer());
          if (type == StateRequestType.LIST_UPDATE) {
            ops.add(op(OpType.OP_TYPE_DELETE, name, kg, key, ns));
          }
          if (add != null) {
            ops.add(add);
            written.written(s.newKeysFiltered(), name, key, ns);
          }
          return NOTHING;
        }
      case MAP_GET:
      case MAP_CONTAINS:
        {
          StatedAsyncStates.MapS m = (StatedAsyncStates.MapS) s;
          java.util.function.Supplier<Op> get =
              () ->
                  opBuilder(
                          type == StateRequestType.MAP_GET
                              ? OpType.OP_TYPE_MAP_GET
                              : OpType.OP_TYPE_MAP_CONTAINS,
                          name,
                          kg,
                          key,
                          ns)
                      .setUserKey(
                          UnsafeByteOperations.unsafeWrap(
                              bytes((TypeSerializer<Object>) m.userKeySerializer(), payload, name)))
                      .build();
          if (type == StateRequestType.MAP_CONTAINS) {
            return sendRead(ops, s, key, ns, get, (rs, from, to) -> rs.get(from).getFound());
          }
          return sendRead(
              ops,
              s,
              key,
              ns,
              get,
              (rs, from, to) -> {
                Result x = rs.get(from);
                return x.getFound()
                    ? StatedMapState.readUserValue(
                        ks.getValueSerializer(), x.getValue().toByteArray(), name)
                    : null;
              });
        }
      case MAP_PUT:
        {
          Tuple2<Object, Object> kv = (Tuple2<Object, Object>) payload;
          ops.add(mapPut((StatedAsyncStates.MapS) s, ks, kg, key, ns, kv.f0, kv.f1));
          written.written(s.newKeysFiltered(), name, key, ns);
          return NOTHING;
        }
      case MAP_PUT_ALL:
        if (payload != null) {
          for (Map.Entry<Object, Object> e : ((Map<Object, Object>) payload).entrySet()) {
            ops.add(mapPut((StatedAsyncStates.MapS) s, ks, kg, key, ns, e.getKey(), e.getValue()));
            written.written(s.newKeysFiltered(), name, key, ns);
          }
        }
        return NOTHING;
      case MAP_REMOVE:
        {
          StatedAsyncStates.MapS m = (StatedAsyncStates.MapS) s;
          ops.add(
              opBuilder(OpType.OP_TYPE_MAP_REMOVE, name, kg, key, ns)
                  .setUserKey(
                      UnsafeByteOperations.unsafeWrap(
                          bytes((TypeSerializer<Object>) m.userKeySerializer(), payload, name)))
                  .build());
          return NOTHING;
        }
      case MAP_IS_EMPTY:
        return sendRead(
            ops,
            s,
            key,
            ns,
            () -> opBuilder(OpType.OP_TYPE_MAP_ITERATE, name, kg, key, ns).setLimit(1).build(),
            (rs, from, to) -> rs.get(from).getEntriesCount() == 0);
      case MAP_ITER:
      case MAP_ITER_KEY:
      case MAP_ITER_VALUE:
        {
          List<Op> page = new ArrayList<>(1);
          Decoder d =
              mapPage(
                  page,
                  (StatedAsyncStates.MapS) s,
                  new StatedAsyncStates.MapCursor(type, kg, key, ns, ByteString.EMPTY));
          return sendRead(ops, s, key, ns, () -> page.get(0), d);
        }
      default:
        throw new UnsupportedOperationException(
            "the stated backend does not support state request " + type);
    }
  }

  private Op append(
      String name,
      int kg,
      byte[] key,
      byte[] ns,
      Collection<Object> values,
      TypeSerializer<Object> el) {
    Op.Builder b = opBuilder(OpType.OP_TYPE_LIST_APPEND, name, kg, key, ns);
    for (Object v : values) {
      if (v == null) {
        throw new NullPointerException("You cannot add null to a ListState.");
      }
      b.addValues(UnsafeByteOperations.unsafeWrap(bytes(el, v, name)));
    }
    return b.build();
  }

  @SuppressWarnings({"unchecked", "rawtypes"})
  private Op mapPut(
      StatedAsyncStates.MapS m,
      AbstractKeyedState<?, ?, Object> ks,
      int kg,
      byte[] key,
      byte[] ns,
      Object userKey,
      Object value) {
    String name = m.stateName();
    byte[] uk = bytes((TypeSerializer<Object>) m.userKeySerializer(), userKey, name);
    byte[] uv = userValue(ks.getValueSerializer(), value, name);
    return opBuilder(OpType.OP_TYPE_MAP_PUT, name, kg, key, ns)
        .setUserKey(UnsafeByteOperations.unsafeWrap(uk))
        .setValue(UnsafeByteOperations.unsafeWrap(uv))
        .build();
  }

  /** One MAP_ITERATE page from the cursor on; its answer is a page iterator. */
  @SuppressWarnings({"unchecked", "rawtypes"})
  private Decoder mapPage(List<Op> ops, StatedAsyncStates.MapS m, StatedAsyncStates.MapCursor c) {
    String name = m.stateName();
    ops.add(
        opBuilder(OpType.OP_TYPE_MAP_ITERATE, name, c.keyGroup, c.key, c.namespace)
            .setUserKey(c.after)
            .setLimit(MAP_PAGE)
            .build());
    return (rs, from, to) -> {
      Result x = rs.get(from);
      // The user key serializer is shared with the task thread: a copy per page.
      TypeSerializer<Object> uks = ((TypeSerializer<Object>) m.userKeySerializer()).duplicate();
      TypeSerializer<Object> uvs = m.getValueSerializer();
      List<Object> items = new ArrayList<>(x.getEntriesCount());
      ByteString last = c.after;
      for (MapEntry e : x.getEntriesList()) {
        last = e.getUserKey();
        switch (c.type) {
          case MAP_ITER_KEY:
            items.add(read(uks, e.getUserKey()));
            break;
          case MAP_ITER_VALUE:
            items.add(StatedMapState.readUserValue(uvs, e.getValue().toByteArray(), name));
            break;
          default:
            items.add(
                new AbstractMap.SimpleImmutableEntry<>(
                    read(uks, e.getUserKey()),
                    StatedMapState.readUserValue(uvs, e.getValue().toByteArray(), name)));
        }
      }
      StatedAsyncStates.MapCursor next =
          x.getMore() && x.getEntriesCount() > 0
              ? new StatedAsyncStates.MapCursor(c.type, c.keyGroup, c.key, c.namespace, last)
              : null;
      return new StatedAsyncStates.MapPage<>(m, c.type, handler.get(), items, next);
    };
  }
}
