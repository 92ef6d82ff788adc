package io.stated.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import com.google.protobuf.ByteString;
import io.grpc.Status;
import io.stated.api.v1.AbortReason;
import io.stated.api.v1.AggregateFunc;
import io.stated.api.v1.BackendKind;
import io.stated.api.v1.ChannelBuffer;
import io.stated.api.v1.ChannelChunk;
import io.stated.api.v1.ChannelDirection;
import io.stated.api.v1.ChannelId;
import io.stated.api.v1.ChannelKind;
import io.stated.api.v1.ChannelRecord;
import io.stated.api.v1.CheckpointInfo;
import io.stated.api.v1.CheckpointStatus;
import io.stated.api.v1.CloseRequest;
import io.stated.api.v1.KeyHash;
import io.stated.api.v1.NumberType;
import io.stated.api.v1.Op;
import io.stated.api.v1.OpType;
import io.stated.api.v1.OpenRequest;
import io.stated.api.v1.OpenResponse;
import io.stated.api.v1.OperatorStateMode;
import io.stated.api.v1.RestoreMode;
import io.stated.api.v1.RestoreSource;
import io.stated.api.v1.Result;
import io.stated.api.v1.SnapshotRequest;
import io.stated.api.v1.SnapshotResponse;
import io.stated.api.v1.StateDescriptor;
import io.stated.api.v1.StateKind;
import io.stated.api.v1.TaskCheckpointStats;
import io.stated.api.v1.TaskId;
import io.stated.api.v1.TriggerSavepointRequest;
import io.stated.api.v1.TriggerSavepointResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.function.Supplier;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.DisplayName;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;
import org.junit.jupiter.api.TestMethodOrder;

/**
 * The Java client against a real daemon ({@code stated serve} on a temporary data dir): every state
 * kind on every backend, barriers right behind unanswered batches, restore modes, savepoints,
 * channel state, the Go client's data read here and the other way round, pipelined single
 * operations cut by the advertised limits, the in-flight bound, bad input, TCP with the token and
 * with TLS, a daemon that is not there, and kill -9 of the daemon. The same checklist as
 * clients/node/conformance.js; each test's display name carries the ids of the cases of
 * docs/conformance.md it runs (JAVA-n: this client's own), and views, key scans and bulk load are
 * VIEW-n.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class ConformanceTest {
  private static final List<StateDescriptor> ALL_STATES =
      List.of(
          state("v", StateKind.STATE_KIND_VALUE),
          state("l", StateKind.STATE_KIND_LIST),
          state("m", StateKind.STATE_KIND_MAP),
          agg("sum", AggregateFunc.AGGREGATE_FUNC_SUM, NumberType.NUMBER_TYPE_INT64),
          agg("cnt", AggregateFunc.AGGREGATE_FUNC_COUNT, NumberType.NUMBER_TYPE_INT64),
          agg("fmax", AggregateFunc.AGGREGATE_FUNC_MAX, NumberType.NUMBER_TYPE_FLOAT64),
          state("t", StateKind.STATE_KIND_TIMERS));

  private Daemon daemon;
  private StatedClient c;

  /**
   * Whether instances use the daemon's batch socket (the client's default) or the Batch call
   * ({@link ConformanceGrpcTest} runs every test so).
   */
  boolean batchSocket() {
    return true;
  }

  @BeforeAll
  void start() throws Exception {
    daemon = new Daemon();
    daemon.start();
    c = daemon.client(batchSocket());
  }

  @AfterAll
  void stop() throws Exception {
    if (c != null) {
      c.close();
    }
    if (daemon != null) {
      daemon.close();
    }
  }

  static StateDescriptor state(String name, StateKind kind) {
    return StateDescriptor.newBuilder().setName(name).setKind(kind).build();
  }

  static StateDescriptor agg(String name, AggregateFunc f, NumberType t) {
    return StateDescriptor.newBuilder()
        .setName(name)
        .setKind(StateKind.STATE_KIND_AGGREGATE)
        .setAggregate(f)
        .setNumber(t)
        .build();
  }

  static TaskId task(String job, int subtask) {
    return TaskId.newBuilder().setJob(job).setOperator("op").setSubtask(subtask).build();
  }

  static OpenRequest.Builder spec(String job, BackendKind kind) {
    return OpenRequest.newBuilder()
        .setTask(task(job, 0))
        .setParallelism(1)
        .setBackendKind(kind)
        .addAllStates(ALL_STATES)
        .setKeyHash(KeyHash.KEY_HASH_FNV1A_MURMUR);
  }

  static ByteString b(String s) {
    return ByteString.copyFromUtf8(s);
  }

  static byte[] k(String s) {
    return s.getBytes(StandardCharsets.UTF_8);
  }

  /** Waits at most a minute: a test never hangs on a lost answer. */
  static <T> T get(Future<T> f) {
    try {
      return f.get(60, TimeUnit.SECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new AssertionError("interrupted", e);
    } catch (ExecutionException e) {
      throw StatedException.from(e, null);
    } catch (TimeoutException e) {
      throw new AssertionError("no answer within a minute", e);
    }
  }

  /** Checks that {@code call} fails with {@code code} and a message naming each of words. */
  static StatedException fails(
      String what, Supplier<? extends Future<?>> call, Status.Code code, String... words) {
    try {
      get(call.get());
    } catch (StatedException e) {
      assertEquals(code, e.code(), what + ": " + e.getMessage());
      for (String w : words) {
        assertTrue(
            e.getMessage().contains(w),
            what + ": message \"" + e.getMessage() + "\" does not name " + w);
      }
      return e;
    }
    return fail(what + ": succeeded, want " + code);
  }

  static void expectCode(String what, Result r, Status.Code code, String... words) {
    assertEquals(code.value(), r.getCode(), what + ": " + r.getError());
    for (String w : words) {
      assertTrue(r.getError().contains(w), what + ": \"" + r.getError() + "\" does not name " + w);
    }
  }

  /** A synchronous get of value state "v". */
  static Result read(Instance inst, String key) {
    CompletableFuture<Result> f = inst.submit(inst.op(OpType.OP_TYPE_GET, "v", k(key)).build());
    inst.flush();
    return get(f);
  }

  static String str(ByteString s) {
    return s.toStringUtf8();
  }

  static String strs(List<ByteString> l) {
    return l.stream().map(ByteString::toStringUtf8).collect(Collectors.joining(","));
  }

  Instance open(OpenRequest.Builder req) {
    Instance inst = get(c.open(req.build()));
    assertEquals(
        batchSocket() ? "batch-socket" : "grpc", inst.transport(), "the batch stream's transport");
    return inst;
  }

  static List<Op> putOps(Instance inst, int from, int n, String value) {
    List<Op> ops = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      ops.add(inst.op(OpType.OP_TYPE_PUT, "v", k("k" + (from + i))).setValue(b(value)).build());
    }
    return ops;
  }

  static List<Result> readAll(Instance inst, List<String> keys) {
    List<Op> ops = new ArrayList<>();
    for (String key : keys) {
      ops.add(inst.op(OpType.OP_TYPE_GET, "v", k(key)).build());
    }
    return get(inst.send(ops)).results();
  }

  static Op.Builder intAdd(Instance inst, String st, String key, long n) {
    return inst.op(OpType.OP_TYPE_AGGREGATE_ADD, st, k(key))
        .setNumberType(NumberType.NUMBER_TYPE_INT64)
        .setIntValue(n);
  }

  @Test
  @Order(1)
  @DisplayName("OPS-1 every state kind on every backend")
  void everyStateKindOnEveryBackend() {
    for (BackendKind kind :
        List.of(
            BackendKind.BACKEND_KIND_HEAP,
            BackendKind.BACKEND_KIND_FILE,
            BackendKind.BACKEND_KIND_LSM)) {
      Instance inst = open(spec("kinds-" + kind.name().toLowerCase(), kind));
      OpenResponse o = inst.openResponse();
      assertEquals(kind, o.getBackendKind());
      assertTrue(
          o.getMaxMessageSize() > 0
              && o.getMaxBatchOps() > 0
              && o.getStreamQueueDepth() > 0
              && o.getMaxViewsPerInstance() > 0,
          "limits not advertised: " + o);
      assertTrue(
          inst.protocolVersion() >= StatedClient.MIN_PROTOCOL_VERSION,
          "protocol revision " + inst.protocolVersion() + " advertised");
      List<Op> ops =
          List.of(
              inst.op(OpType.OP_TYPE_PUT, "v", k("k1")).setValue(b("a")).build(), // 0
              inst.op(OpType.OP_TYPE_GET, "v", k("k1")).build(), // 1
              inst.op(OpType.OP_TYPE_DELETE, "v", k("k1")).build(), // 2
              inst.op(OpType.OP_TYPE_GET, "v", k("k1")).build(), // 3
              inst.op(OpType.OP_TYPE_LIST_APPEND, "l", k("k1"))
                  .addValues(b("x"))
                  .addValues(b("y"))
                  .build(), // 4
              inst.op(OpType.OP_TYPE_LIST_APPEND, "l", k("k1")).addValues(b("z")).build(), // 5
              inst.op(OpType.OP_TYPE_LIST_GET, "l", k("k1")).build(), // 6
              inst.op(OpType.OP_TYPE_MAP_PUT, "m", k("k1"))
                  .setUserKey(b("u1"))
                  .setValue(b("v1"))
                  .build(), // 7
              inst.op(OpType.OP_TYPE_MAP_PUT, "m", k("k1"))
                  .setUserKey(b("u2"))
                  .setValue(b("v2"))
                  .build(), // 8
              inst.op(OpType.OP_TYPE_MAP_GET, "m", k("k1")).setUserKey(b("u1")).build(), // 9
              inst.op(OpType.OP_TYPE_MAP_CONTAINS, "m", k("k1")).setUserKey(b("u2")).build(), // 10
              inst.op(OpType.OP_TYPE_MAP_REMOVE, "m", k("k1")).setUserKey(b("u2")).build(), // 11
              inst.op(OpType.OP_TYPE_MAP_CONTAINS, "m", k("k1")).setUserKey(b("u2")).build(), // 12
              inst.op(OpType.OP_TYPE_MAP_ITERATE, "m", k("k1")).setLimit(10).build(), // 13
              intAdd(inst, "sum", "k1", 5).build(), // 14
              intAdd(inst, "sum", "k1", -7).build(), // 15
              inst.op(OpType.OP_TYPE_AGGREGATE_GET, "sum", k("k1")).build(), // 16
              // COUNT still carries the state's number type; the number is ignored.
              intAdd(inst, "cnt", "k1", 100).build(), // 17
              intAdd(inst, "cnt", "k1", 0).build(), // 18
              inst.op(OpType.OP_TYPE_AGGREGATE_GET, "cnt", k("k1")).build(), // 19
              inst.op(OpType.OP_TYPE_AGGREGATE_ADD, "fmax", k("k1"))
                  .setNumberType(NumberType.NUMBER_TYPE_FLOAT64)
                  .setFloatValue(1.5)
                  .build(), // 20
              inst.op(OpType.OP_TYPE_AGGREGATE_ADD, "fmax", k("k1"))
                  .setNumberType(NumberType.NUMBER_TYPE_FLOAT64)
                  .setFloatValue(2.5)
                  .build(), // 21
              inst.op(OpType.OP_TYPE_AGGREGATE_GET, "fmax", k("k1")).build(), // 22
              inst.op(OpType.OP_TYPE_TIMER_REGISTER, "t", k("k1")).setTimestamp(10).build(), // 23
              inst.op(OpType.OP_TYPE_TIMER_REGISTER, "t", k("k2")).setTimestamp(5).build(), // 24
              inst.op(OpType.OP_TYPE_TIMER_REGISTER, "t", k("k3")).setTimestamp(20).build(), // 25
              inst.op(OpType.OP_TYPE_TIMER_DELETE, "t", k("k2")).setTimestamp(5).build(), // 26
              inst.op(OpType.OP_TYPE_TIMER_REGISTER, "t", k("k2")).setTimestamp(7).build(), // 27
              Op.newBuilder()
                  .setType(OpType.OP_TYPE_TIMER_POLL)
                  .setState("t")
                  .setTimestamp(15)
                  .build(), // 28
              Op.newBuilder()
                  .setType(OpType.OP_TYPE_OPERATOR_SET)
                  .setState("ol")
                  .addValues(b("a"))
                  .setOperatorMode(OperatorStateMode.OPERATOR_STATE_MODE_UNION)
                  .build(), // 29
              Op.newBuilder()
                  .setType(OpType.OP_TYPE_OPERATOR_APPEND)
                  .setState("ol")
                  .addValues(b("b"))
                  .build(), // 30
              Op.newBuilder().setType(OpType.OP_TYPE_OPERATOR_GET).setState("ol").build()); // 31
      BatchResult res = get(inst.send(ops)).check();
      List<Result> r = res.results();
      assertEquals(ops.size(), r.size());
      assertTrue(
          r.get(1).getFound() && str(r.get(1).getValue()).equals("a"), kind + ": GET after PUT");
      assertFalse(r.get(3).getFound(), kind + ": GET after DELETE");
      assertEquals("x,y,z", strs(r.get(6).getValuesList()), kind + ": LIST_GET");
      assertEquals("v1", str(r.get(9).getValue()), kind + ": MAP_GET");
      assertTrue(r.get(10).getFound() && !r.get(12).getFound(), kind + ": MAP_CONTAINS");
      assertEquals(1, r.get(13).getEntriesCount(), kind + ": MAP_ITERATE");
      assertEquals("u1", str(r.get(13).getEntries(0).getUserKey()));
      assertFalse(r.get(13).getMore());
      assertTrue(r.get(16).getFound());
      assertEquals(NumberType.NUMBER_TYPE_INT64, r.get(16).getNumberType());
      assertEquals(-2, r.get(16).getIntValue(), kind + ": sum");
      assertEquals(2, r.get(19).getIntValue(), kind + ": count");
      assertEquals(2.5, r.get(22).getFloatValue(), kind + ": max");
      String polled =
          r.get(28).getTimersList().stream()
              .map(t -> str(t.getKey()) + "@" + t.getTimestamp())
              .collect(Collectors.joining(","));
      assertEquals("k2@7,k1@10", polled, kind + ": TIMER_POLL");
      assertTrue(r.get(31).getFound());
      assertEquals("a,b", strs(r.get(31).getValuesList()));
      assertEquals(OperatorStateMode.OPERATOR_STATE_MODE_UNION, r.get(31).getOperatorMode());
      List<Result> again =
          get(inst.send(
                  List.of(
                      Op.newBuilder()
                          .setType(OpType.OP_TYPE_TIMER_POLL)
                          .setState("t")
                          .setTimestamp(100)
                          .build())))
              .results();
      assertEquals(1, again.get(0).getTimersCount());
      assertEquals("k3", str(again.get(0).getTimers(0).getKey()));
      get(inst.closeInstance());
    }
  }

  /** A barrier holds every operation sent before it on the stream, unanswered or not. */
  @Test
  @Order(2)
  @DisplayName("CKP-1, CKP-2, CKP-3 barriers after unanswered batches; unary Snapshot; ids grow")
  void barriersAfterUnansweredBatches() {
    String job = "order";
    int rounds = 10;
    int batches = 8;
    int per = 250;
    Instance inst = get(c.open(spec(job, BackendKind.BACKEND_KIND_LSM).build(), 64));
    List<CompletableFuture<BatchResult>> sent = new ArrayList<>();
    List<CompletableFuture<SnapshotResponse>> snaps = new ArrayList<>();
    for (int r = 1; r <= rounds; r++) {
      for (int bt = 0; bt < batches; bt++) {
        sent.add(inst.send(putOps(inst, bt * per, per, String.valueOf(r))));
      }
      inst.submit(
          inst.op(OpType.OP_TYPE_PUT, "v", k("last")).setValue(b(String.valueOf(r))).build());
      snaps.add(inst.snapshot(r));
    }
    for (CompletableFuture<BatchResult> f : sent) {
      get(f).check();
    }
    for (CompletableFuture<SnapshotResponse> f : snaps) {
      assertNotNull(get(f));
    }
    // The unary Snapshot would miss requests in flight: refused unless told.
    fails(
        "unary Snapshot",
        () ->
            c.snapshot(
                SnapshotRequest.newBuilder()
                    .setInstanceId(inst.id())
                    .setJob(job)
                    .setCheckpointId(rounds + 1)
                    .build()),
        Status.Code.FAILED_PRECONDITION,
        "barrier");
    get(inst.closeInstance());
    for (int r = 1; r <= rounds; r++) {
      get(c.completeCheckpoint(job, r));
    }
    CheckpointInfo again = get(c.completeCheckpoint(job, rounds)).getCheckpoint();
    assertEquals(CheckpointStatus.CHECKPOINT_STATUS_COMPLETED, again.getState());
    List<CheckpointInfo> retained =
        get(c.listCheckpoints(job)).getCheckpointsList().stream()
            .filter(CheckpointInfo::getRetained)
            .collect(Collectors.toList());
    assertTrue(retained.size() >= 2, "retained " + retained.size());
    List<String> keys = new ArrayList<>(List.of("last"));
    for (int i = 0; i < batches * per; i++) {
      keys.add("k" + i);
    }
    for (CheckpointInfo ck : retained) {
      Instance re =
          open(
              spec(job, BackendKind.BACKEND_KIND_LSM)
                  .setReplace(true)
                  .setRestore(
                      RestoreSource.newBuilder()
                          .setCheckpointId(ck.getCheckpointId())
                          .setMode(RestoreMode.RESTORE_MODE_NO_CLAIM)));
      assertEquals(ck.getCheckpointId(), re.openResponse().getRestoredCheckpointId());
      List<Result> got = readAll(re, keys);
      for (int i = 0; i < keys.size(); i++) {
        assertTrue(
            got.get(i).getFound(), "checkpoint " + ck.getCheckpointId() + ": " + keys.get(i));
        assertEquals(
            String.valueOf(ck.getCheckpointId()),
            str(got.get(i).getValue()),
            "checkpoint " + ck.getCheckpointId() + ": " + keys.get(i));
      }
      get(re.closeInstance());
    }
    assertTrue(
        get(c.listCheckpoints(job)).getCheckpointsList().stream()
            .anyMatch(CheckpointInfo::getPinned),
        "no-claim restore pinned nothing");
    Instance late = open(spec(job, BackendKind.BACKEND_KIND_LSM).setReplace(true));
    assertEquals(rounds, late.openResponse().getLastCompletedCheckpointId());
    fails(
        "old checkpoint id",
        () -> late.snapshot(rounds - 1),
        Status.Code.FAILED_PRECONDITION,
        "already completed");
    get(late.closeInstance());
  }

  @Test
  @Order(3)
  @DisplayName("RST-1, RST-2 restore modes, abort reasons, waited snapshots; canonical savepoint")
  void restoreModesAndSavepoints() {
    fails(
        "restore latest of a new job",
        () ->
            c.open(
                spec("brand-new", BackendKind.BACKEND_KIND_FILE)
                    .setRestore(RestoreSource.newBuilder().setLatest(true))
                    .build()),
        Status.Code.NOT_FOUND);
    String job = "claim";
    Instance inst = open(spec(job, BackendKind.BACKEND_KIND_FILE));
    get(inst.send(putOps(inst, 0, 10, "one"))).check();
    get(inst.snapshot(1, true, null));
    get(c.completeCheckpoint(job, 1));
    get(inst.send(putOps(inst, 0, 10, "two"))).check();
    SnapshotResponse snap = get(inst.snapshot(2, true, null));
    assertTrue(snap.getFiles() > 0 && snap.getFullSize() > 0, "waited snapshot sizes: " + snap);
    get(c.abortCheckpoint(job, 2, AbortReason.ABORT_REASON_DECLINED, "disk full"));
    CheckpointInfo two =
        get(c.listCheckpoints(job)).getCheckpointsList().stream()
            .filter(x -> x.getCheckpointId() == 2)
            .findFirst()
            .orElseThrow();
    assertEquals(CheckpointStatus.CHECKPOINT_STATUS_DECLINED, two.getState());
    assertTrue(two.getReason().contains("disk full"), two.getReason());
    // A canonical savepoint of the open instance, restored into another backend kind.
    get(inst.send(putOps(inst, 0, 10, "three"))).check();
    get(inst.snapshot(3, false, null));
    get(c.completeCheckpoint(job, 3));
    TriggerSavepointResponse sp =
        // Every batch of the job was answered (the snapshot above is a barrier behind them),
        // which is what batches_answered states (SAV-2).
        get(
            c.triggerSavepoint(
                TriggerSavepointRequest.newBuilder().setJob(job).setBatchesAnswered(true).build()));
    assertTrue(sp.getPath().contains("savepoints/"), "savepoint path " + sp.getPath());
    Instance re =
        open(
            spec(job, BackendKind.BACKEND_KIND_FILE)
                .setReplace(true)
                .setRestore(
                    RestoreSource.newBuilder()
                        .setLatest(true)
                        .setMode(RestoreMode.RESTORE_MODE_CLAIM)));
    assertEquals(3, re.openResponse().getRestoredCheckpointId());
    for (Result x : readAll(re, List.of("k0", "k9"))) {
      assertEquals("three", str(x.getValue()));
    }
    get(re.closeInstance());
    Instance fromSp =
        open(
            spec("claim-copy", BackendKind.BACKEND_KIND_LSM)
                .setRestore(RestoreSource.newBuilder().setSavepoint(sp.getPath())));
    for (Result x : readAll(fromSp, List.of("k0", "k9"))) {
      assertEquals("three", str(x.getValue()), "savepoint restored into lsm");
    }
    get(fromSp.closeInstance());
  }

  @Test
  @Order(4)
  @DisplayName("CHS-1 channel state across a rescale 2 -> 3")
  void channelState() {
    String job = "unaligned";
    List<String> written = new ArrayList<>();
    List<Instance> ins = new ArrayList<>();
    for (int sub = 0; sub < 2; sub++) {
      Instance inst =
          open(
              OpenRequest.newBuilder()
                  .setTask(TaskId.newBuilder().setJob(job).setOperator("win").setSubtask(sub))
                  .setParallelism(2)
                  .setBackendKind(BackendKind.BACKEND_KIND_FILE)
                  .addStates(state("v", StateKind.STATE_KIND_VALUE))
                  .setReplace(true));
      ins.add(inst);
      List<ChannelRecord> records = new ArrayList<>();
      for (int i = 0; i < 40; i++) {
        byte[] key = k("in-flight-" + sub + "-" + i);
        int kg = KeyGroups.keyGroup(key, inst.maxParallelism());
        if (kg >= inst.keyGroups().getStart() && kg <= inst.keyGroups().getEnd()) {
          records.add(
              ChannelRecord.newBuilder().setKeyGroup(kg).setData(ByteString.copyFrom(key)).build());
          written.add(new String(key, StandardCharsets.UTF_8));
        }
      }
      ChannelChunk chunk =
          ChannelChunk.newBuilder()
              .setChannel(
                  ChannelId.newBuilder().setDirection(ChannelDirection.CHANNEL_DIRECTION_INPUT))
              .setKind(ChannelKind.CHANNEL_KIND_KEYED)
              .addBuffers(ChannelBuffer.newBuilder().addAllRecords(records.subList(0, 5)))
              .addBuffers(
                  ChannelBuffer.newBuilder().addAllRecords(records.subList(5, records.size())))
              .build();
      assertEquals(records.size(), get(inst.writeChannelState(1, List.of(chunk))).getRecords());
      get(
          inst.snapshot(
              1,
              false,
              TaskCheckpointStats.newBuilder()
                  .setUnaligned(true)
                  .setStartDelayMicros(5000)
                  .build()));
    }
    fails(
        "channel state after the snapshot",
        () -> ins.get(0).writeChannelState(1, List.of()),
        Status.Code.FAILED_PRECONDITION);
    CheckpointInfo info = get(c.completeCheckpoint(job, 1)).getCheckpoint();
    assertTrue(info.getUnaligned() && info.getPersistedInFlightBytes() > 0, "statistics: " + info);
    for (Instance inst : ins) {
      get(inst.closeInstance());
    }
    List<String> got = new ArrayList<>();
    for (int sub = 0; sub < 3; sub++) {
      Instance inst =
          open(
              OpenRequest.newBuilder()
                  .setTask(TaskId.newBuilder().setJob(job).setOperator("win").setSubtask(sub))
                  .setParallelism(3)
                  .setBackendKind(BackendKind.BACKEND_KIND_FILE)
                  .addStates(state("v", StateKind.STATE_KIND_VALUE))
                  .setRestore(RestoreSource.newBuilder().setLatest(true)));
      for (ChannelChunk ch : get(inst.readChannelState())) {
        for (ChannelBuffer buf : ch.getBuffersList()) {
          for (ChannelRecord r : buf.getRecordsList()) {
            assertTrue(
                r.getKeyGroup() >= inst.keyGroups().getStart()
                    && r.getKeyGroup() <= inst.keyGroups().getEnd(),
                "key group outside the subtask's range");
            got.add(str(r.getData()));
          }
        }
      }
      get(inst.closeInstance());
    }
    Collections.sort(got);
    Collections.sort(written);
    assertEquals(written, got, "rescaled channel state");
  }

  /** State the Go client wrote, read here; and the other way round. */
  @Test
  @Order(5)
  @DisplayName("XC-1 state the Go client wrote, and the other way round")
  void crossCheckWithTheGoClient() throws Exception {
    String xcheck = Daemon.xcheck().toString();
    Daemon.run(Daemon.repo().toFile(), xcheck, "write", daemon.socket.toString(), "xgo", "go");
    Instance inst =
        open(
            spec("xgo", BackendKind.BACKEND_KIND_FILE)
                .setReplace(true)
                .setRestore(RestoreSource.newBuilder().setLatest(true)));
    List<Op> ops = new ArrayList<>();
    for (int i = 0; i < 50; i++) {
      String key = "x" + i;
      ops.add(inst.op(OpType.OP_TYPE_GET, "v", k(key)).build());
      ops.add(inst.op(OpType.OP_TYPE_LIST_GET, "l", k(key)).build());
      ops.add(inst.op(OpType.OP_TYPE_MAP_GET, "m", k(key)).setUserKey(b("u")).build());
      ops.add(inst.op(OpType.OP_TYPE_AGGREGATE_GET, "sum", k(key)).build());
    }
    ops.add(
        Op.newBuilder()
            .setType(OpType.OP_TYPE_TIMER_POLL)
            .setState("t")
            .setTimestamp(1050)
            .build());
    ops.add(Op.newBuilder().setType(OpType.OP_TYPE_OPERATOR_GET).setState("ops").build());
    List<Result> r = get(inst.send(ops)).check().results();
    for (int i = 0; i < 50; i++) {
      assertEquals("go-" + i, str(r.get(4 * i).getValue()));
      assertEquals("go," + i, strs(r.get(4 * i + 1).getValuesList()));
      assertEquals("go", str(r.get(4 * i + 2).getValue()));
      assertEquals(i + 1, r.get(4 * i + 3).getIntValue());
    }
    assertEquals(50, r.get(200).getTimersCount());
    assertEquals("go", strs(r.get(201).getValuesList()));
    get(inst.closeInstance());

    OpenRequest.Builder ws =
        spec("xnode", BackendKind.BACKEND_KIND_FILE).setReplace(true).clearStates();
    for (StateDescriptor d : ALL_STATES) {
      if (List.of("v", "l", "m", "sum", "t").contains(d.getName())) {
        ws.addStates(d);
      }
    }
    Instance w = open(ws);
    List<Op> wops = new ArrayList<>();
    for (int i = 0; i < 50; i++) {
      String key = "x" + i;
      // xcheck's reader checks the writer's name, "node" (the Node client's run uses it too).
      wops.add(w.op(OpType.OP_TYPE_PUT, "v", k(key)).setValue(b("node-" + i)).build());
      wops.add(
          w.op(OpType.OP_TYPE_LIST_APPEND, "l", k(key))
              .addValues(b("node"))
              .addValues(b(String.valueOf(i)))
              .build());
      wops.add(
          w.op(OpType.OP_TYPE_MAP_PUT, "m", k(key)).setUserKey(b("u")).setValue(b("node")).build());
      wops.add(intAdd(w, "sum", key, i + 1).build());
      wops.add(w.op(OpType.OP_TYPE_TIMER_REGISTER, "t", k(key)).setTimestamp(1000 + i).build());
    }
    wops.add(
        Op.newBuilder()
            .setType(OpType.OP_TYPE_OPERATOR_SET)
            .setState("ops")
            .addValues(b("node"))
            .setOperatorMode(OperatorStateMode.OPERATOR_STATE_MODE_SPLIT)
            .build());
    CompletableFuture<BatchResult> sent = w.send(wops);
    get(w.snapshot(1));
    get(sent).check();
    get(c.completeCheckpoint("xnode", 1));
    get(w.closeInstance());
    Daemon.run(Daemon.repo().toFile(), xcheck, "read", daemon.socket.toString(), "xnode", "node");
  }

  /** Single operations queued by submit go out in requests cut by the daemon's limits. */
  @Test
  @Order(6)
  @DisplayName("JAVA-1 pipelined submits cut by the advertised limits; the in-flight bound")
  void pipelinedSubmitsAndTheInFlightBound() {
    Instance inst = get(c.open(spec("pipeline", BackendKind.BACKEND_KIND_HEAP).build(), 2));
    int maxOps = inst.openResponse().getMaxBatchOps();
    // More single operations than one request may carry: unsplit, every one
    // would fail with RESOURCE_EXHAUSTED.
    int n = maxOps + 2500;
    List<CompletableFuture<Result>> puts = new ArrayList<>();
    for (int i = 0; i < n; i++) {
      puts.add(
          inst.submit(inst.op(OpType.OP_TYPE_PUT, "v", k("p" + i)).setValue(b("v" + i)).build()));
      assertTrue(inst.inFlight() <= 2, "in flight " + inst.inFlight() + " beyond the bound of 2");
    }
    // Reads submitted behind the writes see them (read your writes, in order).
    List<CompletableFuture<Result>> gets = new ArrayList<>();
    for (int i = 0; i < n; i += 997) {
      gets.add(inst.submit(inst.op(OpType.OP_TYPE_GET, "v", k("p" + i)).build()));
    }
    // A large value spills the queue into a request of its own.
    byte[] big = new byte[600 << 10];
    CompletableFuture<Result> bigPut =
        inst.submit(
            inst.op(OpType.OP_TYPE_PUT, "v", k("big")).setValue(ByteString.copyFrom(big)).build());
    CompletableFuture<Result> bigPut2 =
        inst.submit(
            inst.op(OpType.OP_TYPE_PUT, "v", k("big2")).setValue(ByteString.copyFrom(big)).build());
    CompletableFuture<Result> bad =
        inst.submit(inst.op(OpType.OP_TYPE_PUT, "nope", k("x")).setValue(b("x")).build());
    inst.flush();
    for (CompletableFuture<Result> f : puts) {
      assertEquals(0, get(f).getCode());
    }
    int j = 0;
    for (int i = 0; i < n; i += 997) {
      assertEquals("v" + i, str(get(gets.get(j++)).getValue()));
    }
    get(bigPut);
    get(bigPut2);
    fails("a failed submitted operation", () -> bad, Status.Code.INVALID_ARGUMENT, "\"nope\"");
    get(inst.closeInstance());
  }

  /**
   * The batch stream's futures complete on the thread that reads the answers: a callback that sends
   * while every slot is in flight fails at once instead of waiting for an answer its own thread
   * would have to read (a hang before the check), and the stream goes on.
   */
  @Test
  @Order(6)
  @DisplayName("JAVA-5 callbacks on the I/O thread: a send with no free slot fails at once")
  void callbackSendsWithoutAFreeSlot() {
    Instance inst = get(c.open(spec("io-thread", BackendKind.BACKEND_KIND_HEAP).build(), 2));
    List<CompletableFuture<BatchResult>> sent = new ArrayList<>();
    Thread[] ran = new Thread[1];
    // Submitted, not sent: the callback is in place before the answer can come.
    CompletableFuture<Result> first =
        inst.submit(inst.op(OpType.OP_TYPE_PUT, "v", k("first")).setValue(b("1")).build());
    CompletableFuture<Void> callback =
        first.thenAccept(
            r -> {
              ran[0] = Thread.currentThread();
              // Both slots are free (the only request was answered), and no
              // answer can free one while this runs: the third has none.
              for (int i = 0; i < 3; i++) {
                sent.add(
                    inst.send(
                        List.of(
                            inst.op(OpType.OP_TYPE_PUT, "v", k("cb" + i))
                                .setValue(b("cb" + i))
                                .build())));
              }
            });
    inst.flush();
    get(callback);
    assertNotNull(ran[0]);
    assertFalse(
        ran[0] == Thread.currentThread(),
        "the callback ran on the thread that sent, not the I/O one");
    assertEquals(3, sent.size());
    get(sent.get(0));
    get(sent.get(1));
    fails(
        "a send from a callback with both slots in flight",
        () -> sent.get(2),
        Status.Code.FAILED_PRECONDITION,
        "all 2 slots were in flight",
        "executor");
    // The refused request was never sent: the stream goes on in order.
    assertEquals("cb1", str(read(inst, "cb1").getValue()));
    assertFalse(read(inst, "cb2").getFound(), "the refused put was applied");
    get(inst.closeInstance());
  }

  @Test
  @Order(7)
  @DisplayName(
      "ERR-1, ERR-2, ERR-3 bad operations, bad Open requests, unknown and foreign instances")
  void badInput() {
    OpenRequest.Builder s =
        OpenRequest.newBuilder()
            .setTask(task("bad", 0))
            .setParallelism(2)
            .setBackendKind(BackendKind.BACKEND_KIND_HEAP)
            .addAllStates(ALL_STATES)
            .setKeyHash(KeyHash.KEY_HASH_FNV1A_MURMUR);
    Instance inst = open(s);
    assertEquals(KeyHash.KEY_HASH_FNV1A_MURMUR, inst.openResponse().getKeyHash());
    int start = inst.keyGroups().getStart();
    int end = inst.keyGroups().getEnd();
    int inside = 0;
    while (KeyGroups.keyGroup(k("i" + inside), inst.maxParallelism()) == start) {
      inside++;
    }
    int outside = 0;
    while (KeyGroups.keyGroup(k("o" + outside), inst.maxParallelism()) <= end) {
      outside++;
    }
    byte[] big = new byte[(int) inst.openResponse().getMaxValueSize() + 1];
    List<Result> r =
        get(inst.send(
                List.of(
                    inst.op(OpType.OP_TYPE_PUT, "v", k("o" + outside)).setValue(b("x")).build(),
                    inst.op(OpType.OP_TYPE_PUT, "nope", k("k")).setValue(b("x")).build(),
                    inst.op(OpType.OP_TYPE_LIST_GET, "v", k("k")).build(),
                    inst.op(OpType.OP_TYPE_AGGREGATE_ADD, "sum", k("k"))
                        .setNumberType(NumberType.NUMBER_TYPE_FLOAT64)
                        .setFloatValue(1)
                        .build(),
                    inst.op(OpType.OP_TYPE_PUT, "v", k("k"))
                        .setValue(ByteString.copyFrom(big))
                        .build(),
                    Op.newBuilder()
                        .setType(OpType.OP_TYPE_UNSPECIFIED)
                        .setState("v")
                        .setKey(b("k"))
                        .build(),
                    inst.op(OpType.OP_TYPE_PUT, "v", k("fine")).setValue(b("ok")).build(),
                    inst.op(OpType.OP_TYPE_PUT, "v", k("i" + inside))
                        .setValue(b("x"))
                        .setKeyGroup(start)
                        .build())))
            .results();
    expectCode("key group outside the range", r.get(0), Status.Code.INVALID_ARGUMENT, "key group");
    expectCode("unknown state", r.get(1), Status.Code.INVALID_ARGUMENT, "\"nope\"");
    expectCode("wrong state kind", r.get(2), Status.Code.INVALID_ARGUMENT, "\"v\"");
    expectCode("wrong number type", r.get(3), Status.Code.INVALID_ARGUMENT, "\"sum\"");
    expectCode("value too large", r.get(4), Status.Code.RESOURCE_EXHAUSTED);
    expectCode("unknown operation type", r.get(5), Status.Code.INVALID_ARGUMENT);
    assertEquals(0, r.get(6).getCode(), r.get(6).getError());
    expectCode("key group not the key's", r.get(7), Status.Code.INVALID_ARGUMENT, "not the key's");
    int maxOps = inst.openResponse().getMaxBatchOps();
    BatchResult many = get(inst.send(putOps(inst, 0, maxOps + 1, "x")));
    expectCode(
        "too many operations", many.get(0), Status.Code.RESOURCE_EXHAUSTED, String.valueOf(maxOps));
    fails("checkpoint id 0", () -> inst.snapshot(0), Status.Code.INVALID_ARGUMENT, "id 0");
    assertEquals(
        "ok",
        str(readAll(inst, List.of("fine")).get(0).getValue()),
        "the stream broke on bad input");
    fails("open twice", () -> c.open(s.build()), Status.Code.FAILED_PRECONDITION);
    fails(
        "open without task",
        () ->
            c.openRaw(
                OpenRequest.newBuilder()
                    .setParallelism(1)
                    .setBackendKind(BackendKind.BACKEND_KIND_HEAP)
                    .build()),
        Status.Code.INVALID_ARGUMENT,
        "task");
    @SuppressWarnings("deprecation")
    OpenRequest rocks =
        s.clone()
            .setTask(task("bad", 0).toBuilder().setOperator("op2"))
            .clearBackendKind()
            .setBackend("rocks")
            .build();
    fails("unknown backend", () -> c.openRaw(rocks), Status.Code.INVALID_ARGUMENT, "rocks");
    fails(
        "max parallelism out of range",
        () ->
            c.openRaw(
                s.clone()
                    .setTask(task("bad", 0).toBuilder().setOperator("op4"))
                    .setMaxParallelism(1 << 20)
                    .build()),
        Status.Code.INVALID_ARGUMENT);
    ByteString unknown =
        ByteString.copyFrom(new byte[] {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7});
    fails(
        "close unknown instance",
        () ->
            c.closeInstance(CloseRequest.newBuilder().setInstanceId(unknown).setJob("bad").build()),
        Status.Code.NOT_FOUND);
    fails(
        "another job",
        () ->
            c.closeInstance(
                CloseRequest.newBuilder().setInstanceId(inst.id()).setJob("other").build()),
        Status.Code.PERMISSION_DENIED);
    fails(
        "batch on an unknown instance",
        () ->
            c.attach(
                task("bad", 0),
                OpenResponse.newBuilder().setInstanceId(unknown).setMaxParallelism(128).build(),
                4),
        Status.Code.NOT_FOUND);
    get(inst.closeInstance());
    // After CloseInstance the instance's id is unknown, and its stream is gone.
    fails(
        "send after close", () -> inst.send(List.of()), Status.Code.FAILED_PRECONDITION, "closed");
  }

  @Test
  @Order(8)
  @DisplayName("JAVA-2 TCP with the token")
  void tcpWithTheToken() throws Exception {
    int port = Daemon.freePort();
    try (Daemon d = new Daemon("--listen", "127.0.0.1:" + port, "--token", "s3cret")) {
      d.start();
      try (StatedClient ok = StatedClient.tcp("127.0.0.1", port).token("s3cret").build();
          StatedClient wrong = StatedClient.tcp("127.0.0.1", port).token("nope").build();
          StatedClient none = StatedClient.tcp("127.0.0.1", port).build()) {
        fails("wrong token", () -> wrong.listCheckpoints("j"), Status.Code.UNAUTHENTICATED);
        fails("no token", () -> none.listCheckpoints("j"), Status.Code.UNAUTHENTICATED);
        Instance inst = get(ok.open(spec("tcp", BackendKind.BACKEND_KIND_HEAP).build()));
        assertEquals(
            "", inst.openResponse().getBatchSocket(), "a TCP client is named no batch socket");
        assertEquals("grpc", inst.transport());
        get(inst.send(putOps(inst, 0, 5, "tcp"))).check();
        assertEquals("tcp", str(readAll(inst, List.of("k4")).get(0).getValue()));
        get(inst.closeInstance());
      }
    }
  }

  @Test
  @Order(9)
  @DisplayName("JAVA-3 TCP with TLS")
  void tcpWithTls() throws Exception {
    Path dir = Files.createTempDirectory("stated-tls-");
    Path cert = dir.resolve("cert.pem");
    Path key = dir.resolve("key.pem");
    Daemon.run(
        dir.toFile(),
        "openssl",
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=localhost",
        "-addext",
        "subjectAltName=DNS:localhost,IP:127.0.0.1",
        "-keyout",
        key.toString(),
        "-out",
        cert.toString());
    int port = Daemon.freePort();
    try (Daemon d =
        new Daemon(
            "--listen",
            "127.0.0.1:" + port,
            "--token",
            "tlstoken",
            "--tls-cert",
            cert.toString(),
            "--tls-key",
            key.toString())) {
      d.start();
      try (StatedClient ok =
              StatedClient.tcp("127.0.0.1", port).tls(cert).token("tlstoken").build();
          StatedClient plain = StatedClient.tcp("127.0.0.1", port).token("tlstoken").build()) {
        Instance inst = get(ok.open(spec("tls", BackendKind.BACKEND_KIND_HEAP).build()));
        get(inst.send(putOps(inst, 0, 5, "tls"))).check();
        assertEquals("tls", str(readAll(inst, List.of("k1")).get(0).getValue()));
        get(inst.closeInstance());
        // Plaintext against a TLS-only listener does not get through.
        fails("plaintext against TLS", () -> plain.listCheckpoints("j"), Status.Code.UNAVAILABLE);
      }
    } finally {
      Files.deleteIfExists(cert);
      Files.deleteIfExists(key);
      Files.deleteIfExists(dir);
    }
  }

  @Test
  @Order(10)
  @DisplayName("JAVA-4 a daemon that is not there")
  void aDaemonThatIsNotThere() throws Exception {
    Path missing = daemon.dir.resolve("nobody-here.sock");
    try (StatedClient gone = StatedClient.unixSocket(missing).build()) {
      fails(
          "no daemon",
          () -> gone.listCheckpoints("j"),
          Status.Code.UNAVAILABLE,
          missing.toString(),
          "stated serve");
    }
  }

  @Test
  @Order(7)
  @DisplayName("OPS-2 a timer registered twice is one")
  void aTimerRegisteredTwiceIsOne() {
    Instance inst = open(spec("ops2", BackendKind.BACKEND_KIND_HEAP));
    List<Result> r =
        get(inst.send(
                List.of(
                    inst.op(OpType.OP_TYPE_TIMER_REGISTER, "t", k("k")).setTimestamp(5).build(),
                    inst.op(OpType.OP_TYPE_TIMER_REGISTER, "t", k("k")).setTimestamp(5).build(),
                    Op.newBuilder()
                        .setType(OpType.OP_TYPE_TIMER_POLL)
                        .setState("t")
                        .setTimestamp(10)
                        .build())))
            .check()
            .results();
    assertEquals(1, r.get(2).getTimersCount(), "timers polled");
    assertFalse(r.get(2).getMore());
    get(inst.closeInstance());
  }

  @Test
  @Order(7)
  @DisplayName("OPS-4 MAP_ITERATE pages")
  void mapIteratePages() {
    Instance inst = open(spec("ops4", BackendKind.BACKEND_KIND_FILE));
    List<Op> puts = new ArrayList<>();
    for (int i = 0; i < 25; i++) {
      puts.add(
          inst.op(OpType.OP_TYPE_MAP_PUT, "m", k("key"))
              .setUserKey(b(String.format("u%02d", i)))
              .setValue(b("v" + i))
              .build());
    }
    get(inst.send(puts)).check();
    List<Integer> sizes = new ArrayList<>();
    List<Boolean> mores = new ArrayList<>();
    List<String> seen = new ArrayList<>();
    ByteString after = ByteString.EMPTY;
    while (true) {
      Result r =
          get(inst.send(
                  List.of(
                      inst.op(OpType.OP_TYPE_MAP_ITERATE, "m", k("key"))
                          .setUserKey(after)
                          .setLimit(10)
                          .build())))
              .check()
              .get(0);
      sizes.add(r.getEntriesCount());
      mores.add(r.getMore());
      r.getEntriesList().forEach(e -> seen.add(str(e.getUserKey())));
      if (!r.getMore()) {
        break;
      }
      after = r.getEntries(r.getEntriesCount() - 1).getUserKey();
    }
    assertEquals(List.of(10, 10, 5), sizes);
    assertEquals(List.of(true, true, false), mores);
    List<String> sorted = new ArrayList<>(seen);
    Collections.sort(sorted);
    assertEquals(sorted, seen, "user-key order");
    assertEquals(25, seen.size());
    get(inst.closeInstance());
  }

  /**
   * A view taken as a barrier behind unanswered writes holds exactly them, while later writes go
   * on; key scans, entry counts, late state registration and a bulk load into another instance.
   */
  @Test
  @Order(7)
  @DisplayName("VIEW-1 views, key scans, late states and bulk load")
  void viewsScansAndLoad() {
    Instance inst =
        open(
            spec("views", BackendKind.BACKEND_KIND_LSM)
                .clearStates()
                .addStates(state("v", StateKind.STATE_KIND_VALUE)));
    get(
        inst.registerStates(
            List.of(state("l", StateKind.STATE_KIND_LIST), state("m", StateKind.STATE_KIND_MAP))));
    int n = 3000;
    for (int i = 0; i < n; i += 500) {
      inst.send(putOps(inst, i, 500, "before"));
    }
    inst.submit(
        inst.op(OpType.OP_TYPE_LIST_APPEND, "l", k("k1"))
            .addValues(b("x"))
            .addValues(b("y"))
            .build());
    inst.submit(
        inst.op(OpType.OP_TYPE_MAP_PUT, "m", k("k2")).setUserKey(b("u")).setValue(b("mv")).build());
    CompletableFuture<io.stated.api.v1.ViewInfo> vf = inst.view(0);
    // Writes after the barrier are not in the view.
    CompletableFuture<BatchResult> after = inst.send(putOps(inst, 0, n, "after"));
    io.stated.api.v1.ViewInfo view = get(vf);
    get(after).check();
    assertEquals(
        List.of("l", "m", "v"),
        view.getStatesList().stream().map(StateDescriptor::getName).collect(Collectors.toList()));
    Instance copy =
        open(
            spec("views-copy", BackendKind.BACKEND_KIND_FILE)
                .clearStates()
                .addStates(state("v", StateKind.STATE_KIND_VALUE))
                .addStates(state("l", StateKind.STATE_KIND_LIST))
                .addStates(state("m", StateKind.STATE_KIND_MAP)));
    int entries = 0;
    int lastKg = -1;
    try (Loader loader = copy.load()) {
      java.util.Iterator<io.stated.api.v1.ScanViewResponse> pages =
          inst.scanView(
              io.stated.api.v1.ScanViewRequest.newBuilder()
                  .setViewId(view.getViewId())
                  .setPageBytes(16 << 10)
                  .build());
      while (pages.hasNext()) {
        for (io.stated.api.v1.ViewEntry e : pages.next().getEntriesList()) {
          assertTrue(e.getKeyGroup() >= lastKg, "scan not in key-group order");
          lastKg = e.getKeyGroup();
          String st = view.getStates(e.getStateId()).getName();
          if (st.equals("v")) {
            assertEquals("before", str(e.getValue()), "the view saw a write after its barrier");
          }
          loader.add(e.toBuilder().setState(st).build());
          entries++;
        }
      }
      assertEquals(n + 2, loader.finish().getEntries());
    }
    assertEquals(n + 2, entries);
    get(inst.releaseView(view.getViewId()));
    fails("release twice", () -> inst.releaseView(view.getViewId()), Status.Code.NOT_FOUND);
    assertEquals(n + 2, (long) get(copy.countEntries("")));
    List<Result> got = readAll(copy, List.of("k0", "k" + (n - 1)));
    assertEquals("before", str(got.get(0).getValue()));
    assertEquals("before", str(got.get(1).getValue()));
    Result l =
        get(copy.send(List.of(copy.op(OpType.OP_TYPE_LIST_GET, "l", k("k1")).build()))).get(0);
    assertEquals("x,y", strs(l.getValuesList()));
    // Key scans of the live instance page through every key of a state once.
    java.util.Set<String> keys = new java.util.HashSet<>();
    ByteString cursor = ByteString.EMPTY;
    while (true) {
      io.stated.api.v1.ScanKeysResponse page =
          get(
              inst.scanKeys(
                  io.stated.api.v1.ScanKeysRequest.newBuilder()
                      .setState("v")
                      .setLimit(700)
                      .setCursor(cursor)
                      .build()));
      page.getKeysList()
          .forEach(x -> assertTrue(keys.add(str(x.getKey())), "key twice: " + str(x.getKey())));
      if (!page.getMore()) {
        break;
      }
      cursor = page.getCursor();
    }
    assertEquals(n, keys.size());
    fails(
        "a state registered again with another kind",
        () -> inst.registerStates(List.of(state("v", StateKind.STATE_KIND_LIST))),
        Status.Code.FAILED_PRECONDITION);
    get(copy.closeInstance());
    get(inst.closeInstance());
  }

  /** kill -9 behind a barrier: unanswered requests fail, the restarted daemon restores it. */
  @Test
  @Order(11)
  @DisplayName("RST-4 kill and restart")
  void killRestartRestore() throws Exception {
    String job = "restart";
    Instance inst = open(spec(job, BackendKind.BACKEND_KIND_FILE));
    List<CompletableFuture<BatchResult>> sent = new ArrayList<>();
    for (int bt = 0; bt < 4; bt++) {
      sent.add(inst.send(putOps(inst, bt * 250, 250, "before")));
    }
    CompletableFuture<SnapshotResponse> snap = inst.snapshot(1);
    sent.add(inst.send(putOps(inst, 0, 1000, "after")));
    for (CompletableFuture<BatchResult> f : sent) {
      get(f).check();
    }
    get(snap);
    get(c.completeCheckpoint(job, 1));
    daemon.kill();
    // The stream's end fails what is sent next, with the daemon named.
    StatedException e =
        fails("send to a dead daemon", () -> inst.send(List.of()), Status.Code.UNAVAILABLE);
    assertNotNull(inst.failure(), "the instance did not notice the stream's end: " + e);
    assertTrue(
        e.getMessage().contains(daemon.socket.toString())
            && e.getMessage().contains("stated serve"),
        "the error names the daemon's socket and how to start it: " + e.getMessage());
    daemon.start();
    Instance re =
        open(
            spec(job, BackendKind.BACKEND_KIND_FILE)
                .setRestore(RestoreSource.newBuilder().setLatest(true)));
    assertEquals(1, re.openResponse().getRestoredCheckpointId());
    List<String> keys = new ArrayList<>();
    for (int i = 0; i < 1000; i++) {
      keys.add("k" + i);
    }
    List<Result> got = readAll(re, keys);
    for (int i = 0; i < keys.size(); i++) {
      assertEquals("before", str(got.get(i).getValue()), "after restart " + keys.get(i));
    }
    get(re.send(putOps(re, 0, 10, "again"))).check();
    get(re.snapshot(2));
    get(c.completeCheckpoint(job, 2));
    get(re.closeInstance());
  }
}
