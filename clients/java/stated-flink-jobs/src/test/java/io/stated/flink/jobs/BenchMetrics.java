package io.stated.flink.jobs;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ConcurrentLinkedQueue;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.metrics.Counter;
import org.apache.flink.metrics.Histogram;
import org.apache.flink.metrics.Metric;
import org.apache.flink.metrics.MetricConfig;
import org.apache.flink.metrics.MetricGroup;
import org.apache.flink.metrics.reporter.MetricReporter;
import org.apache.flink.metrics.reporter.MetricReporterFactory;

/**
 * A metric reporter for the benchmarks' MiniClusters (same JVM): it keeps the stated asynchronous
 * executor's metrics (batches, operations, batch round trips) of every task, so that a benchmark
 * can say where an event's latency went. {@link #install} adds it to a cluster configuration; Flink
 * finds the factory through the service file in src/test/resources (it loads reporter factories
 * with the ServiceLoader, and skips a factory class it did not find there).
 */
public final class BenchMetrics implements MetricReporterFactory {
  private static final ConcurrentLinkedQueue<Histogram> ROUND_TRIPS = new ConcurrentLinkedQueue<>();
  private static final ConcurrentLinkedQueue<Counter> BATCHES = new ConcurrentLinkedQueue<>();
  private static final ConcurrentLinkedQueue<Counter> OPS = new ConcurrentLinkedQueue<>();

  /** Reports to this class from clusters started with {@code conf}. */
  static void install(Configuration conf) {
    conf.setString("metrics.reporter.bench.factory.class", BenchMetrics.class.getName());
  }

  /** Forgets what earlier clusters reported. */
  static void reset() {
    ROUND_TRIPS.clear();
    BATCHES.clear();
    OPS.clear();
  }

  /**
   * One line on the stated executor's batches since {@link #reset}, or null when none reported
   * (another backend).
   */
  static String summary() {
    if (ROUND_TRIPS.isEmpty()) {
      return null;
    }
    long batches = BATCHES.stream().mapToLong(Counter::getCount).sum();
    long ops = OPS.stream().mapToLong(Counter::getCount).sum();
    List<long[]> parts = new ArrayList<>();
    for (Histogram h : ROUND_TRIPS) {
      parts.add(h.getStatistics().getValues());
    }
    long[] all = parts.stream().flatMapToLong(Arrays::stream).toArray();
    Arrays.sort(all);
    if (all.length == 0) {
      return String.format("%d batches, %d operations, no round trip recorded", batches, ops);
    }
    return String.format(
        "%d batches of %.0f operations on average; a batch's round trip (send to answer), of the"
            + " last %d per task: p50 %.1f ms, p99 %.1f ms",
        batches,
        batches == 0 ? 0.0 : (double) ops / batches,
        all.length / Math.max(1, parts.size()),
        all[(int) (all.length * 0.50)] / 1e3,
        all[(int) (all.length * 0.99)] / 1e3);
  }

  @Override
  public MetricReporter createMetricReporter(Properties properties) {
    return new MetricReporter() {
      @Override
      public void open(MetricConfig config) {}

      @Override
      public void close() {}

      @Override
      public void notifyOfAddedMetric(Metric metric, String name, MetricGroup group) {
        switch (name) {
          case "statedAsyncBatchRoundTripMicros":
            ROUND_TRIPS.add((Histogram) metric);
            break;
          case "statedAsyncBatches":
            BATCHES.add((Counter) metric);
            break;
          case "statedAsyncOperations":
            OPS.add((Counter) metric);
            break;
          default:
        }
      }

      @Override
      public void notifyOfRemovedMetric(Metric metric, String name, MetricGroup group) {
        // Kept: read after the job ends.
      }
    };
  }
}
