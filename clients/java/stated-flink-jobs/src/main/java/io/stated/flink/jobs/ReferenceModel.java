package io.stated.flink.jobs;

import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;

/**
 * The output of {@link KeyedAggregationJob} computed without Flink: a plain loop over the same
 * generated events. It is the oracle of the tests: a run on any backend, with or without failures,
 * rescales or backend changes, must produce exactly these results. Memory grows with keys x
 * (payload + windows), so it suits test-sized runs, not the benchmark's.
 */
public final class ReferenceModel {
  private ReferenceModel() {}

  /** The expected results by {@link Result#id()}. */
  public static Map<String, Result> expected(JobParams p) {
    Map<Long, byte[]> payloads = new HashMap<>();
    // key -> window start -> {count, sum, max}
    Map<Long, TreeMap<Long, long[]>> windows = new HashMap<>();
    for (long i = 0; i < p.events; i++) {
      Event e = EventGenerator.event(i, p.seed, p.keys, p.outOfOrdernessMs);
      byte[] pl = payloads.computeIfAbsent(e.key, k -> Payload.initial(k, p.payloadBytes));
      Payload.apply(pl, e.value);
      long w = KeyedAggregator.windowStart(e.timestamp, p.windowMs);
      long[] agg =
          windows
              .computeIfAbsent(e.key, k -> new TreeMap<>())
              .computeIfAbsent(w, x -> new long[] {0, 0, Long.MIN_VALUE});
      agg[0]++;
      agg[1] += e.value;
      agg[2] = Math.max(agg[2], e.value);
    }
    Map<String, Result> out = new TreeMap<>();
    for (Map.Entry<Long, TreeMap<Long, long[]>> k : windows.entrySet()) {
      long key = k.getKey();
      long total = 0;
      long fired = 0;
      for (Map.Entry<Long, long[]> w : k.getValue().entrySet()) {
        long[] a = w.getValue();
        total += a[1];
        fired++;
        Result r =
            new Result(Result.WINDOW, key, w.getKey(), a[0], a[1], a[2], a[1], total, fired, 0);
        out.put(r.id(), r);
      }
      byte[] pl = payloads.get(key);
      Result f =
          new Result(
              Result.FINAL,
              key,
              -1,
              Payload.count(pl),
              0,
              0,
              0,
              total,
              fired,
              Payload.checksum(pl));
      out.put(f.id(), f);
    }
    return out;
  }
}
