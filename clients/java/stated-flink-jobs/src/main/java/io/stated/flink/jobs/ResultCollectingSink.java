package io.stated.flink.jobs;

import java.util.concurrent.ConcurrentHashMap;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;

/**
 * A sink that adds results to a {@link ResultSet} registered under a name in this JVM. It is not
 * exactly-once by itself (a restore replays results); the {@link ResultSet} turns the replays into
 * a check instead. Only for MiniClusters running inside the JVM that reads the set: tests and the
 * benchmark.
 */
public final class ResultCollectingSink implements Sink<Result> {
  private static final long serialVersionUID = 1L;
  private static final ConcurrentHashMap<String, ResultSet> SETS = new ConcurrentHashMap<>();

  private final String name;
  private final boolean finalOnly;

  /**
   * @param name the set to add to, see {@link #results(String)}
   * @param finalOnly keep only FINAL and LATE results (one per key), to bound memory in the
   *     benchmark; WINDOW results are counted in {@link ResultSet#emitted()} no more
   */
  public ResultCollectingSink(String name, boolean finalOnly) {
    this.name = name;
    this.finalOnly = finalOnly;
  }

  /** The set for a name, created empty on first use. */
  public static ResultSet results(String name) {
    return SETS.computeIfAbsent(name, n -> new ResultSet());
  }

  /** Forgets a set, so that its memory is freed. */
  public static void drop(String name) {
    SETS.remove(name);
  }

  @Override
  public SinkWriter<Result> createWriter(WriterInitContext context) {
    ResultSet set = results(name);
    return new SinkWriter<>() {
      @Override
      public void write(Result r, Context ctx) {
        if (!finalOnly || !Result.WINDOW.equals(r.kind)) {
          set.add(r);
        }
      }

      @Override
      public void flush(boolean endOfInput) {}

      @Override
      public void close() {}
    };
  }
}
