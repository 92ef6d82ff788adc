package io.stated.flink.jobs;

import java.util.ArrayList;
import java.util.List;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.CheckpointListener;
import org.apache.flink.api.common.state.ListState;
import org.apache.flink.api.common.state.ListStateDescriptor;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.PrimitiveArrayTypeInfo;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.java.tuple.Tuple2;
import org.apache.flink.runtime.state.FunctionInitializationContext;
import org.apache.flink.runtime.state.FunctionSnapshotContext;
import org.apache.flink.streaming.api.checkpoint.CheckpointedFunction;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.util.Collector;

/**
 * The job's keyed operator. Per event it reads and writes the key's payload (value state), appends
 * the value to the open windows' list (list state), adds it to the window's sum (map state) and
 * registers the window's event-time timer; a key's first event also registers the end-of-input
 * timer. A window's timer emits the window from list and map state and adds it to the key's running
 * total (value state); the end-of-input timer emits the key's final state.
 *
 * <p>Everything emitted depends only on the input, not on when watermarks or checkpoints happen, so
 * a run with failures must produce exactly the output of one without (see {@link Result}); {@link
 * ReferenceModel} computes that output without Flink.
 */
public class KeyedAggregator extends KeyedProcessFunction<Long, Event, Result>
    implements CheckpointListener, CheckpointedFunction {
  private static final long serialVersionUID = 1L;

  /** The end-of-input timer: fires only on the final watermark. */
  static final long FINAL_TIMER = Long.MAX_VALUE;

  private final JobParams params;

  private transient ValueState<byte[]> payload;
  private transient ValueState<Long> firedTotal;
  private transient ValueState<Long> firedWindows;
  private transient ListState<Tuple2<Long, Long>> open;
  private transient MapState<Long, Long> windowSums;

  private transient boolean failureArmed;
  private transient long processedHere;
  private transient long checkpointsCompletedHere;

  public KeyedAggregator(JobParams params) {
    this.params = params;
  }

  @Override
  public void open(OpenContext openContext) {
    payload =
        getRuntimeContext()
            .getState(
                new ValueStateDescriptor<>(
                    "payload", PrimitiveArrayTypeInfo.BYTE_PRIMITIVE_ARRAY_TYPE_INFO));
    firedTotal =
        getRuntimeContext().getState(new ValueStateDescriptor<>("fired-total", Types.LONG));
    firedWindows =
        getRuntimeContext().getState(new ValueStateDescriptor<>("fired-windows", Types.LONG));
    open =
        getRuntimeContext()
            .getListState(
                new ListStateDescriptor<>("open-windows", Types.TUPLE(Types.LONG, Types.LONG)));
    windowSums =
        getRuntimeContext()
            .getMapState(new MapStateDescriptor<>("window-sums", Types.LONG, Types.LONG));
    failureArmed =
        params.failAfterRecords > 0
            && getRuntimeContext().getTaskInfo().getIndexOfThisSubtask() == 0
            && getRuntimeContext().getTaskInfo().getAttemptNumber() == 0;
  }

  @Override
  public void initializeState(FunctionInitializationContext context) {
    // Called after the keyed backend restored its state, so this marks the end of restore.
    if (context.isRestored()) {
      RecoveryProbe.recordRestored();
    }
  }

  @Override
  public void snapshotState(FunctionSnapshotContext context) {
    // All state is keyed state, snapshotted by the backend itself.
  }

  @Override
  public void notifyCheckpointComplete(long checkpointId) {
    checkpointsCompletedHere++;
  }

  @Override
  public void processElement(Event e, Context ctx, Collector<Result> out) throws Exception {
    RecoveryProbe.recordProcessed();
    processedHere++;
    if (failureArmed && checkpointsCompletedHere > 0 && processedHere >= params.failAfterRecords) {
      failureArmed = false;
      RecoveryProbe.recordFailure();
      throw new InjectedFailure(
          "injected failure after "
              + processedHere
              + " records and "
              + checkpointsCompletedHere
              + " completed checkpoints");
    }

    long w = windowStart(e.timestamp, params.windowMs);
    long windowTimer = w + params.windowMs - 1;
    if (windowTimer <= ctx.timerService().currentWatermark()) {
      // Its window has fired: the generator and watermark rule this out, so say so loudly.
      out.collect(new Result(Result.LATE, e.key, e.timestamp, 1, e.value, e.value, 0, 0, 0, 0));
      return;
    }

    byte[] p = payload.value();
    if (p == null) {
      p = Payload.initial(e.key, params.payloadBytes);
      ctx.timerService().registerEventTimeTimer(FINAL_TIMER);
    }
    Payload.apply(p, e.value);
    payload.update(p);

    open.add(Tuple2.of(w, e.value));
    Long s = windowSums.get(w);
    windowSums.put(w, (s == null ? 0 : s) + e.value);
    ctx.timerService().registerEventTimeTimer(windowTimer);
  }

  @Override
  public void onTimer(long timestamp, OnTimerContext ctx, Collector<Result> out) throws Exception {
    long key = ctx.getCurrentKey();
    long total = orZero(firedTotal.value());
    long windows = orZero(firedWindows.value());
    if (timestamp == FINAL_TIMER) {
      byte[] p = payload.value();
      out.collect(
          new Result(
              Result.FINAL,
              key,
              -1,
              Payload.count(p),
              0,
              0,
              0,
              total,
              windows,
              Payload.checksum(p)));
      return;
    }
    long w = timestamp - params.windowMs + 1;
    long count = 0;
    long sum = 0;
    long max = Long.MIN_VALUE;
    List<Tuple2<Long, Long>> rest = new ArrayList<>();
    Iterable<Tuple2<Long, Long>> entries = open.get();
    if (entries != null) {
      for (Tuple2<Long, Long> t : entries) {
        if (t.f0 == w) {
          count++;
          sum += t.f1;
          max = Math.max(max, t.f1);
        } else {
          rest.add(t);
        }
      }
    }
    open.update(rest);
    long mapSum = orZero(windowSums.get(w));
    windowSums.remove(w);
    total += sum;
    windows++;
    firedTotal.update(total);
    firedWindows.update(windows);
    out.collect(new Result(Result.WINDOW, key, w, count, sum, max, mapSum, total, windows, 0));
  }

  static long windowStart(long ts, long windowMs) {
    return ts - Math.floorMod(ts, windowMs);
  }

  private static long orZero(Long v) {
    return v == null ? 0 : v;
  }

  /** The exception of an injected failure, so logs and tests can tell it from a real one. */
  public static final class InjectedFailure extends Exception {
    private static final long serialVersionUID = 1L;

    InjectedFailure(String message) {
      super(message);
    }
  }
}
