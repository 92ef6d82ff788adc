package io.stated.flink.jobs;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.Map;
import org.apache.flink.util.ParameterTool;
import org.junit.jupiter.api.Test;

/** The job's parameters and generator, without a cluster. */
class JobParamsTest {
  @Test
  void defaultsAreValidAndArgumentsOverrideThem() {
    JobParams p =
        JobParams.fromParameterTool(
            ParameterTool.fromArgs(
                new String[] {"--events", "10", "--keys", "3", "--payload-bytes", "32"}));
    assertThat(p.events).isEqualTo(10);
    assertThat(p.keys).isEqualTo(3);
    assertThat(p.payloadBytes).isEqualTo(32);
    assertThat(p.windowMs).isEqualTo(new JobParams().windowMs);
  }

  @Test
  void badArgumentsAreRefusedByName() {
    assertThatThrownBy(
            () -> JobParams.fromParameterTool(ParameterTool.fromArgs(new String[] {"--keys", "0"})))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("--keys must be >= 1, got 0");
    assertThatThrownBy(
            () ->
                JobParams.fromParameterTool(
                    ParameterTool.fromArgs(new String[] {"--payload-bytes", "8"})))
        .hasMessageContaining("--payload-bytes must be in [16, 64 MiB], got 8");
    assertThatThrownBy(
            () ->
                JobParams.fromParameterTool(
                    ParameterTool.fromArgs(
                        new String[] {"--parallelism", "4", "--max-parallelism", "2"})))
        .hasMessageContaining("--max-parallelism must be in [parallelism, 32768], got 2");
    assertThatThrownBy(
            () ->
                JobParams.fromParameterTool(ParameterTool.fromArgs(new String[] {"--rate", "-1"})))
        .hasMessageContaining("--rate must be >= 0");
    assertThatThrownBy(
            () ->
                JobParams.fromParameterTool(
                    ParameterTool.fromArgs(
                        new String[] {"--rate", "10", "--records-per-checkpoint", "5"})))
        .hasMessageContaining("--rate and --records-per-checkpoint exclude each other");
  }

  @Test
  void generatorIsDeterministicAndNeverBehindTheWatermark() {
    JobParams p = new JobParams();
    long maxTs = Long.MIN_VALUE;
    for (long i = 0; i < 100_000; i++) {
      Event e = EventGenerator.event(i, p.seed, p.keys, p.outOfOrdernessMs);
      assertThat(e).isEqualTo(EventGenerator.event(i, p.seed, p.keys, p.outOfOrdernessMs));
      assertThat(e.key).isBetween(0L, (long) p.keys - 1);
      // Flink's bounded-out-of-orderness watermark after the events so far.
      long watermark = maxTs == Long.MIN_VALUE ? Long.MIN_VALUE : maxTs - p.outOfOrdernessMs - 1;
      assertThat(e.timestamp).as("event %d behind the watermark", i).isGreaterThan(watermark);
      maxTs = Math.max(maxTs, e.timestamp);
    }
  }

  @Test
  void modelCountsEveryEventOnce() {
    JobParams p = new JobParams();
    p.events = 5_000;
    p.keys = 17;
    Map<String, Result> m = ReferenceModel.expected(p);
    long events = 0;
    long windowSum = 0;
    long finalTotal = 0;
    for (Result r : m.values()) {
      if (r.kind.equals(Result.FINAL)) {
        events += r.count;
        finalTotal += r.total;
      } else {
        assertThat(r.kind).isEqualTo(Result.WINDOW);
        assertThat(r.mapSum).isEqualTo(r.sum);
        windowSum += r.sum;
      }
    }
    assertThat(events).isEqualTo(p.events);
    assertThat(finalTotal).isEqualTo(windowSum);
  }
}
