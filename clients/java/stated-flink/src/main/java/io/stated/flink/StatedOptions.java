package io.stated.flink;

import org.apache.flink.configuration.ConfigOption;
import org.apache.flink.configuration.ConfigOptions;
import org.apache.flink.configuration.MemorySize;

/** The options of the stated state backend, all under {@code state.backend.stated.*}. */
public final class StatedOptions {
  private StatedOptions() {}

  public static final ConfigOption<String> SOCKET =
      ConfigOptions.key("state.backend.stated.socket")
          .stringType()
          .noDefaultValue()
          .withDescription(
              "The daemon's Unix socket (stated serve's <data-dir>/stated.sock). Either this or"
                  + " state.backend.stated.address is required.");

  public static final ConfigOption<String> ADDRESS =
      ConfigOptions.key("state.backend.stated.address")
          .stringType()
          .noDefaultValue()
          .withDescription("host:port of a daemon serving TCP (stated serve --listen).");

  public static final ConfigOption<String> TOKEN =
      ConfigOptions.key("state.backend.stated.token")
          .stringType()
          .noDefaultValue()
          .withDescription("The daemon's --token, for TCP.");

  public static final ConfigOption<Boolean> TLS =
      ConfigOptions.key("state.backend.stated.tls")
          .booleanType()
          .defaultValue(false)
          .withDescription("Speak TLS to the TCP address.");

  public static final ConfigOption<String> TLS_CA =
      ConfigOptions.key("state.backend.stated.tls.ca")
          .stringType()
          .noDefaultValue()
          .withDescription(
              "PEM bundle the daemon's certificate is checked against (default: the JVM's).");

  public static final ConfigOption<String> BACKEND_KIND =
      ConfigOptions.key("state.backend.stated.kind")
          .stringType()
          .defaultValue("file")
          .withDescription(
              "Where the daemon keeps a task's working state: heap, file (memory) or lsm"
                  + " (Pebble on local disk).");

  public static final ConfigOption<String> TIMER_SERVICE =
      ConfigOptions.key("state.backend.stated.timer-service")
          .stringType()
          .defaultValue("daemon")
          .withDescription(
              "Where the timers of keyed operators live: daemon (the default: daemon map states"
                  + " with each key group's earliest timers cached in the JVM, in every snapshot"
                  + " as the other states, as RocksDB keeps them in RocksDB) or heap (Flink's heap"
                  + " queues in the JVM, which the timer service writes into every checkpoint"
                  + " and reads back whole on a restore, as RocksDB's HEAP option). Operators"
                  + " with asynchronous state (State V2) keep them on the heap. Switching between"
                  + " the two needs a canonical savepoint when checkpoints are incremental.");

  public static final ConfigOption<Integer> MAX_IN_FLIGHT =
      ConfigOptions.key("state.backend.stated.max-in-flight")
          .intType()
          .defaultValue(8)
          .withDescription("Batch requests a task keeps unanswered on its stream.");

  public static final ConfigOption<MemorySize> CACHE_SIZE =
      ConfigOptions.key("state.backend.stated.cache-size")
          .memoryType()
          .noDefaultValue()
          .withDescription(
              "Bytes of JVM heap each keyed operator subtask may use to cache its state"
                  + " (write-through: reads of cached keys need no round trip to the daemon,"
                  + " writes are batched either way). 0 switches the cache off. Unset: the"
                  + " slot's share of managed memory for the state backend, split evenly among"
                  + " the slot's keyed operators, as RocksDB's instances in a slot share one"
                  + " block cache (reserved there, held on the heap; 64 MiB when the slot has no"
                  + " managed memory). Set: taken from the task heap, a TaskManager holds one"
                  + " cache per keyed operator per slot.");

  public static final ConfigOption<Boolean> BATCH_SOCKET =
      ConfigOptions.key("state.backend.stated.batch-socket")
          .booleanType()
          .defaultValue(true)
          .withDescription(
              "With a Unix socket: send each instance's batch stream on the daemon's batch socket"
                  + " (the path the daemon names at open) rather than through gRPC: the same"
                  + " requests and answers with fewer thread hand-offs, about three times the"
                  + " synchronous reads per second. False keeps everything on gRPC. If the batch"
                  + " socket cannot be reached, gRPC is used and a warning says why.");

  public static final ConfigOption<Boolean> READ_AHEAD =
      ConfigOptions.key("state.backend.stated.read-ahead")
          .booleanType()
          .defaultValue(true)
          .withDescription(
              "When a read misses the cache, also read in the same request the current key's"
                  + " entries of the states the operator has been reading together with that"
                  + " one (in at least a quarter of the records and timers that read it, at the"
                  + " same namespace), so that their reads right after need no round trip of"
                  + " their own. Needs the cache.");

  public static final ConfigOption<Boolean> INCREMENTAL =
      ConfigOptions.key("state.backend.stated.incremental")
          .booleanType()
          .defaultValue(false)
          .withDescription(
              "Checkpoints as stated's incremental lsm checkpoints (kind lsm only): the daemon"
                  + " writes the changed files under its --external-dir, and Flink's checkpoint"
                  + " holds them as an IncrementalRemoteKeyedStateHandle, so Flink counts the"
                  + " shared files and deletes every file when it discards the checkpoint."
                  + " Savepoints stay canonical full snapshots. Run the daemon with --external-dir"
                  + " set to Flink's checkpoint directory (a path both reach).");

  public static final ConfigOption<String> EXTERNAL_ROOT =
      ConfigOptions.key("state.backend.stated.external-root")
          .stringType()
          .defaultValue("")
          .withDescription(
              "With incremental checkpoints: the directory, relative to the daemon's"
                  + " --external-dir, under which a job's files go, as <external-root>/<job id>."
                  + " Empty (the default): <job id>, which is Flink's own directory of the job"
                  + " when --external-dir is Flink's checkpoint directory.");

  public static final ConfigOption<MemorySize> ASYNC_CACHE_SIZE =
      ConfigOptions.key("state.backend.stated.async-cache-size")
          .memoryType()
          .defaultValue(MemorySize.ZERO)
          .withDescription(
              "Bytes of JVM heap each operator subtask with asynchronous state (State V2) may use"
                  + " to cache its value, reducing and aggregating state (write-back: a get of"
                  + " a cached key sends nothing to the daemon, and writes reach it when evicted"
                  + " or at the next snapshot, so a hot key costs one put per checkpoint). 0, the"
                  + " default, switches it off: on mostly cold keys the cache's lookups cost the"
                  + " task more CPU than the reads they saved; on hot keys (docs/flink.md,"
                  + " Nexmark's query 17) it is worth turning on.");

  public static final ConfigOption<MemorySize> ASYNC_NEW_KEY_FILTER_SIZE =
      ConfigOptions.key("state.backend.stated.async-new-key-filter-size")
          .memoryType()
          .defaultValue(MemorySize.ofMebiBytes(8))
          .withDescription(
              "Bytes of JVM heap each operator subtask with asynchronous state (State V2) may use"
                  + " for a Bloom filter of the keys its states have written since they were"
                  + " registered in a fresh instance: a read of a key never written is answered"
                  + " as absent without the daemon (the first read of every new key; a restored"
                  + " state is not filtered). 8 MiB holds about four million keys x states;"
                  + " past its bound the filter stops and every read goes to the daemon. 0"
                  + " switches it off.");
}
