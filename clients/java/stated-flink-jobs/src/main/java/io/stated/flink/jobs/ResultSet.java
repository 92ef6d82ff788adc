package io.stated.flink.jobs;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A job's output as a set of results by {@link Result#id()}, tolerant of replays: after a restore a
 * job emits again what it emitted between its last checkpoint and the failure, and those repeats
 * must be equal to the first emission. A repeat that differs is recorded as a conflict: it means
 * state was counted twice or lost, which is exactly what an exactly-once check must catch.
 * Thread-safe: all sink subtasks add to one set.
 */
public final class ResultSet {
  private final ConcurrentHashMap<String, Result> results = new ConcurrentHashMap<>();
  private final List<String> conflicts = new ArrayList<>();
  private long emitted;

  public void add(Result r) {
    Result prev = results.putIfAbsent(r.id(), r);
    synchronized (this) {
      emitted++;
      if (prev != null && !prev.equals(r)) {
        conflicts.add("first " + prev + " then " + r);
      }
    }
  }

  /** Adds all of another set (the output of an earlier run of the same logical job). */
  public void addAll(ResultSet other) {
    for (Result r : other.results.values()) {
      add(r);
    }
  }

  public Map<String, Result> byId() {
    return new TreeMap<>(results);
  }

  public int size() {
    return results.size();
  }

  /** Results emitted, repeats included. */
  public synchronized long emitted() {
    return emitted;
  }

  public synchronized List<String> conflicts() {
    return new ArrayList<>(conflicts);
  }

  /**
   * Compares with the expected results: "" when equal and free of conflicts, else a report of the
   * first differences.
   */
  public String diff(Map<String, Result> expected) {
    StringBuilder b = new StringBuilder();
    List<String> c = conflicts();
    if (!c.isEmpty()) {
      b.append(c.size()).append(" conflicting repeats, first: ").append(c.get(0)).append('\n');
    }
    int shown = 0;
    int missing = 0;
    int wrong = 0;
    int extra = 0;
    for (Map.Entry<String, Result> e : expected.entrySet()) {
      Result got = results.get(e.getKey());
      if (got == null) {
        missing++;
        if (shown++ < 5) {
          b.append("missing ").append(e.getValue()).append('\n');
        }
      } else if (!got.equals(e.getValue())) {
        wrong++;
        if (shown++ < 5) {
          b.append("want ").append(e.getValue()).append("\n got ").append(got).append('\n');
        }
      }
    }
    for (Map.Entry<String, Result> e : results.entrySet()) {
      if (!expected.containsKey(e.getKey())) {
        extra++;
        if (shown++ < 5) {
          b.append("unexpected ").append(e.getValue()).append('\n');
        }
      }
    }
    if (missing + wrong + extra > 0) {
      b.append(missing)
          .append(" missing, ")
          .append(wrong)
          .append(" wrong, ")
          .append(extra)
          .append(" unexpected of ")
          .append(expected.size())
          .append(" expected\n");
    }
    return b.toString();
  }
}
