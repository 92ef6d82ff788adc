package io.stated.flink.jobs;

import java.io.Serializable;
import org.apache.flink.util.ParameterTool;

/**
 * The shape of one run of {@link KeyedAggregationJob}: how many events, over how many keys, how
 * much value state per key, the window length, and whether to inject a failure. Every field has a
 * validated default; {@link #validate()} names the bad field and the accepted range.
 */
public final class JobParams implements Serializable {
  private static final long serialVersionUID = 1L;

  /** Number of events the bounded source emits. */
  public long events = 200_000;

  /** Number of distinct keys. */
  public int keys = 1_000;

  /** Bytes of value state per key (the payload; its first 8 bytes hold the event count). */
  public int payloadBytes = 64;

  /** Event-time window length in ms (the generator advances event time 1 ms per event). */
  public long windowMs = 100;

  /** Maximum out-of-orderness of event time in ms; the watermark lags by this much. */
  public int outOfOrdernessMs = 8;

  /** Source rate in events per second; 0 means as fast as the job goes. */
  public double ratePerSecond = 0;

  /**
   * Events the source may emit per completed checkpoint; 0 means no such limit. It ties the job's
   * progress to its checkpoints, so a test can count on a job spanning many checkpoints however
   * slow the machine is. Excludes {@link #ratePerSecond}.
   */
  public long recordsPerCheckpoint = 0;

  /** Parallelism of the keyed operator and the sink (the source always runs at 1). */
  public int parallelism = 2;

  /** Maximum parallelism (the number of key groups); keep it fixed across rescales. */
  public int maxParallelism = 128;

  /** Checkpoint interval in ms, used when the configuration sets none. */
  public long checkpointIntervalMs = 150;

  /**
   * Inject one failure: subtask 0 of the keyed operator, in the job's first attempt, throws once it
   * has processed this many records and seen a completed checkpoint. 0 disables it.
   */
  public long failAfterRecords = 0;

  /** Seed of the event generator. */
  public long seed = 42;

  /**
   * Reads {@code --events}, {@code --keys}, ... from a ParameterTool; absent ones keep defaults.
   */
  public static JobParams fromParameterTool(ParameterTool pt) {
    JobParams p = new JobParams();
    p.events = pt.getLong("events", p.events);
    p.keys = pt.getInt("keys", p.keys);
    p.payloadBytes = pt.getInt("payload-bytes", p.payloadBytes);
    p.windowMs = pt.getLong("window-ms", p.windowMs);
    p.outOfOrdernessMs = pt.getInt("out-of-orderness-ms", p.outOfOrdernessMs);
    p.ratePerSecond = pt.getDouble("rate", p.ratePerSecond);
    p.recordsPerCheckpoint = pt.getLong("records-per-checkpoint", p.recordsPerCheckpoint);
    p.parallelism = pt.getInt("parallelism", p.parallelism);
    p.maxParallelism = pt.getInt("max-parallelism", p.maxParallelism);
    p.checkpointIntervalMs = pt.getLong("checkpoint-interval-ms", p.checkpointIntervalMs);
    p.failAfterRecords = pt.getLong("fail-after-records", p.failAfterRecords);
    p.seed = pt.getLong("seed", p.seed);
    return p.validate();
  }

  /** A copy, so that tests can derive variants without sharing one mutable object. */
  public JobParams copy() {
    JobParams p = new JobParams();
    p.events = events;
    p.keys = keys;
    p.payloadBytes = payloadBytes;
    p.windowMs = windowMs;
    p.outOfOrdernessMs = outOfOrdernessMs;
    p.ratePerSecond = ratePerSecond;
    p.recordsPerCheckpoint = recordsPerCheckpoint;
    p.parallelism = parallelism;
    p.maxParallelism = maxParallelism;
    p.checkpointIntervalMs = checkpointIntervalMs;
    p.failAfterRecords = failAfterRecords;
    p.seed = seed;
    return p;
  }

  /** Checks every field; returns this, or throws naming the field and its accepted range. */
  public JobParams validate() {
    check(events >= 1, "--events must be >= 1, got " + events);
    check(keys >= 1, "--keys must be >= 1, got " + keys);
    check(
        payloadBytes >= 16 && payloadBytes <= (64 << 20),
        "--payload-bytes must be in [16, 64 MiB], got " + payloadBytes);
    check(windowMs >= 1, "--window-ms must be >= 1, got " + windowMs);
    check(
        outOfOrdernessMs >= 0 && outOfOrdernessMs < 1_000_000,
        "--out-of-orderness-ms must be in [0, 1000000), got " + outOfOrdernessMs);
    check(ratePerSecond >= 0, "--rate must be >= 0 (0 = unthrottled), got " + ratePerSecond);
    check(
        recordsPerCheckpoint >= 0 && recordsPerCheckpoint <= Integer.MAX_VALUE,
        "--records-per-checkpoint must be in [0, 2^31), got " + recordsPerCheckpoint);
    check(
        ratePerSecond == 0 || recordsPerCheckpoint == 0,
        "--rate and --records-per-checkpoint exclude each other; set one");
    check(parallelism >= 1, "--parallelism must be >= 1, got " + parallelism);
    check(
        maxParallelism >= parallelism && maxParallelism <= (1 << 15),
        "--max-parallelism must be in [parallelism, 32768], got " + maxParallelism);
    check(
        checkpointIntervalMs >= 10,
        "--checkpoint-interval-ms must be >= 10, got " + checkpointIntervalMs);
    check(failAfterRecords >= 0, "--fail-after-records must be >= 0, got " + failAfterRecords);
    return this;
  }

  private static void check(boolean ok, String message) {
    if (!ok) {
      throw new IllegalArgumentException(message);
    }
  }

  @Override
  public String toString() {
    return "events="
        + events
        + " keys="
        + keys
        + " payloadBytes="
        + payloadBytes
        + " windowMs="
        + windowMs
        + " outOfOrdernessMs="
        + outOfOrdernessMs
        + " rate="
        + ratePerSecond
        + " recordsPerCheckpoint="
        + recordsPerCheckpoint
        + " parallelism="
        + parallelism
        + " maxParallelism="
        + maxParallelism
        + " failAfterRecords="
        + failAfterRecords
        + " seed="
        + seed;
  }
}
