package io.stated.flink.jobs;

import org.apache.flink.connector.datagen.source.GeneratorFunction;

/**
 * Maps the source's sequence number to an event, as a pure function of the index and the seed: a
 * replay after a restore produces exactly the same events.
 *
 * <p>Event time advances 1 ms per index, minus a jitter below {@code outOfOrdernessMs}; the source
 * runs at parallelism 1 with a bounded-out-of-orderness watermark of the same bound, so no event is
 * ever behind the watermark and the output does not depend on when watermarks happen to be emitted.
 */
public final class EventGenerator implements GeneratorFunction<Long, Event> {
  private static final long serialVersionUID = 1L;

  private final long seed;
  private final int keys;
  private final int outOfOrdernessMs;

  public EventGenerator(JobParams params) {
    this.seed = params.seed;
    this.keys = params.keys;
    this.outOfOrdernessMs = params.outOfOrdernessMs;
  }

  @Override
  public Event map(Long index) {
    return event(index, seed, keys, outOfOrdernessMs);
  }

  /** The event at {@code index}; shared with {@link ReferenceModel}. */
  public static Event event(long index, long seed, int keys, int outOfOrdernessMs) {
    long h = mix64(index ^ seed);
    long key = Math.floorMod(h, (long) keys);
    long jitter = outOfOrdernessMs == 0 ? 0 : Math.floorMod(mix64(h), (long) outOfOrdernessMs);
    long ts = Math.max(0, index - jitter);
    long value = Math.floorMod(mix64(h ^ 0x9E3779B97F4A7C15L), 1000L);
    return new Event(key, ts, value);
  }

  /** SplitMix64's finalizer: a fixed, well-spread 64-bit hash. */
  public static long mix64(long z) {
    z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
    z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
    return z ^ (z >>> 31);
  }
}
