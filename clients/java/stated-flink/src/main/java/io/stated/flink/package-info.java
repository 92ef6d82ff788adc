/**
 * A Flink 2.3.0 state backend that keeps a task's keyed state in a stated daemon.
 *
 * <p>The task stays a thin client: keyed Value, List, Map, Reducing and Aggregating state live in
 * the daemon (reducing and aggregating as read-modify-write in the JVM), writes are pipelined on
 * the instance's batch stream without waiting and reads wait for their answer, which the stream's
 * order makes see every earlier write. Timers stay in the JVM (Flink's heap priority queues,
 * written into raw keyed state at checkpoints, as RocksDB's heap-timer option does) and operator
 * state uses Flink's default operator backend. Checkpoints and savepoints are Flink's own: the
 * canonical key-grouped format ({@code KeyGroupsStateHandle}) written by Flink's {@code
 * FullSnapshotAsyncWriter} from a read view the daemon freezes at a barrier on the stream, while
 * the task goes on writing; a restore loads the daemon from those handles. With {@link
 * io.stated.flink.StatedOptions#INCREMENTAL} checkpoints are stated's incremental lsm checkpoints
 * instead, as {@code IncrementalRemoteKeyedStateHandle}s over the daemon's files ({@link
 * io.stated.flink.StatedIncrementalSnapshotStrategy}, {@link io.stated.flink.ExternalSnapshots}).
 */
package io.stated.flink;
