/**
 * A real Flink job to run on stated and on Flink's own state backends, and the tooling that runs it
 * in a MiniCluster.
 *
 * <ul>
 *   <li>{@link io.stated.flink.jobs.KeyedAggregationJob}: the example job (its main class and its
 *       pipeline), a keyed aggregation with value, list and map state and event-time timers over a
 *       bounded deterministic source; {@link io.stated.flink.jobs.KeyedAggregator} is its keyed
 *       operator and {@link io.stated.flink.jobs.JobParams} its validated parameters.
 *   <li>{@link io.stated.flink.jobs.ReferenceModel}: the job's output computed without Flink, the
 *       oracle of the tests; {@link io.stated.flink.jobs.ResultSet} compares outputs and turns a
 *       restore's replays into a check.
 *   <li>{@link io.stated.flink.jobs.MiniClusterJobs}: submit, await, checkpoint statistics; {@link
 *       io.stated.flink.jobs.SideBySideBenchmark}: the side-by-side benchmark.
 * </ul>
 *
 * Imports point down to Flink's public and runtime APIs only; nothing here depends on stated's own
 * classes, which join at run time through {@code state.backend.type}.
 */
package io.stated.flink.jobs;
