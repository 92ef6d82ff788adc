package io.stated.flink.jobs;

import java.util.Objects;

/**
 * One output record. A job's output is a set of results, each named by {@link #id()}: a run that
 * replays part of its input after a failure emits some results again, and those must be equal to
 * the first emission (see {@link ResultSet}).
 *
 * <ul>
 *   <li>{@code WINDOW}: one event-time window of one key, emitted by its timer: the count, sum and
 *       maximum of the window's values (from list state), the window's sum kept separately in map
 *       state (so two state kinds must agree), and the running total and number of the key's fired
 *       windows (value state).
 *   <li>{@code FINAL}: emitted once per key at the end of input (the watermark reaches the end):
 *       the key's event count (in {@code count}), a checksum of its payload (value state) and the
 *       total and number of its fired windows.
 *   <li>{@code LATE}: an event whose window had already fired. The generator and watermark strategy
 *       rule that out, so any LATE result is a bug that a comparison reveals.
 * </ul>
 */
public class Result {
  public static final String WINDOW = "WINDOW";
  public static final String FINAL = "FINAL";
  public static final String LATE = "LATE";

  public String kind;
  public long key;

  /** Window start for WINDOW, event time for LATE, -1 for FINAL. */
  public long window;

  public long count;
  public long sum;
  public long max;
  public long mapSum;
  public long total;
  public long windows;
  public long checksum;

  public Result() {}

  public Result(
      String kind,
      long key,
      long window,
      long count,
      long sum,
      long max,
      long mapSum,
      long total,
      long windows,
      long checksum) {
    this.kind = kind;
    this.key = key;
    this.window = window;
    this.count = count;
    this.sum = sum;
    this.max = max;
    this.mapSum = mapSum;
    this.total = total;
    this.windows = windows;
    this.checksum = checksum;
  }

  /** The identity of a result: at most one result per id in a correct output. */
  public String id() {
    return kind + "/" + key + "/" + window;
  }

  @Override
  public boolean equals(Object o) {
    if (!(o instanceof Result)) {
      return false;
    }
    Result r = (Result) o;
    return Objects.equals(kind, r.kind)
        && key == r.key
        && window == r.window
        && count == r.count
        && sum == r.sum
        && max == r.max
        && mapSum == r.mapSum
        && total == r.total
        && windows == r.windows
        && checksum == r.checksum;
  }

  @Override
  public int hashCode() {
    return Objects.hash(kind, key, window, count, sum, max, mapSum, total, windows, checksum);
  }

  @Override
  public String toString() {
    return kind
        + " key="
        + key
        + " window="
        + window
        + " count="
        + count
        + " sum="
        + sum
        + " max="
        + max
        + " mapSum="
        + mapSum
        + " total="
        + total
        + " windows="
        + windows
        + " checksum="
        + checksum;
  }
}
