package io.stated.flink.jobs;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.api.java.functions.KeySelector;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.sink.PrintSink;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;
import org.apache.flink.util.ParameterTool;

/**
 * The example job: a keyed aggregation over a bounded, deterministic, event-time source, with
 * value, list and map state and event-time timers (see {@link KeyedAggregator}), checkpointed every
 * {@link JobParams#checkpointIntervalMs} ms. Its state backend is whatever {@code
 * state.backend.type} says ({@code hashmap}, {@code rocksdb}, {@code forst}, or a factory class
 * such as stated's {@code io.stated.flink.StatedStateBackendFactory}).
 *
 * <p>Run it with {@code flink run -c io.stated.flink.jobs.KeyedAggregationJob <jar> [--events N]
 * [--keys K] [--payload-bytes B] [--output print|discard]}; arguments that contain a dot ({@code
 * --state.backend.type rocksdb}) are passed to Flink as configuration. docs/flink.md has the full
 * list and a flink-conf snippet.
 */
public final class KeyedAggregationJob {
  public static final String SOURCE_UID = "events";
  public static final String AGGREGATE_UID = "aggregate";
  public static final String SINK_UID = "sink";

  private KeyedAggregationJob() {}

  public static void main(String[] args) throws Exception {
    ParameterTool pt = ParameterTool.fromArgs(args);
    JobParams params = JobParams.fromParameterTool(pt);
    Map<String, String> flinkOptions = new HashMap<>();
    for (Map.Entry<String, String> e : pt.toMap().entrySet()) {
      if (e.getKey().contains(".")) {
        flinkOptions.put(e.getKey(), e.getValue());
      }
    }
    Configuration conf = withDefaults(Configuration.fromMap(flinkOptions), params);
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    String output = pt.get("output", "print");
    Sink<Result> sink;
    switch (output) {
      case "print":
        sink = new PrintSink<>();
        break;
      case "discard":
        sink = new DiscardingSink<>();
        break;
      default:
        throw new IllegalArgumentException("--output must be print or discard, got " + output);
    }
    build(env, params, sink);
    env.execute("stated keyed aggregation example (" + params + ")");
  }

  /**
   * Returns a copy of {@code conf} with what the job needs where {@code conf} says nothing: the
   * checkpoint interval of {@code params} and a fixed-delay restart strategy (3 attempts, 100 ms
   * apart), so that a failure restores from the last checkpoint.
   */
  public static Configuration withDefaults(Configuration conf, JobParams params) {
    Configuration c = new Configuration(conf);
    if (!c.contains(CheckpointingOptions.CHECKPOINTING_INTERVAL)) {
      c.set(
          CheckpointingOptions.CHECKPOINTING_INTERVAL,
          Duration.ofMillis(params.checkpointIntervalMs));
    }
    if (!c.contains(RestartStrategyOptions.RESTART_STRATEGY)) {
      c.set(RestartStrategyOptions.RESTART_STRATEGY, "fixed-delay");
      c.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, 3);
      c.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ofMillis(100));
    }
    return c;
  }

  /**
   * Adds the job to {@code env}: source (parallelism 1) -> keyBy -> {@link KeyedAggregator} ->
   * {@code sink}, with fixed operator uids so that savepoints restore across versions, parallelisms
   * and backends.
   */
  public static void build(StreamExecutionEnvironment env, JobParams params, Sink<Result> sink) {
    params.validate();
    env.setParallelism(params.parallelism);
    env.setMaxParallelism(params.maxParallelism);
    RateLimiterStrategy<?> rate;
    if (params.ratePerSecond > 0) {
      rate = RateLimiterStrategy.perSecond(params.ratePerSecond);
    } else if (params.recordsPerCheckpoint > 0) {
      rate = RateLimiterStrategy.perCheckpoint((int) params.recordsPerCheckpoint);
    } else {
      rate = RateLimiterStrategy.noOp();
    }
    @SuppressWarnings({"unchecked", "rawtypes"})
    DataGeneratorSource<Event> source =
        new DataGeneratorSource<>(
            new EventGenerator(params),
            params.events,
            (RateLimiterStrategy) rate,
            TypeInformation.of(Event.class));
    WatermarkStrategy<Event> watermarks =
        WatermarkStrategy.<Event>forBoundedOutOfOrderness(
                Duration.ofMillis(params.outOfOrdernessMs))
            .withTimestampAssigner((e, previous) -> e.timestamp);
    env.fromSource(source, watermarks, "events")
        .uid(SOURCE_UID)
        .setParallelism(1)
        .keyBy(new EventKey(), Types.LONG)
        .process(new KeyedAggregator(params))
        .uid(AGGREGATE_UID)
        .name("aggregate")
        .sinkTo(sink)
        .uid(SINK_UID)
        .name("sink");
  }

  /** The key of an event. */
  public static final class EventKey implements KeySelector<Event, Long> {
    private static final long serialVersionUID = 1L;

    @Override
    public Long getKey(Event e) {
      return e.key;
    }
  }
}
