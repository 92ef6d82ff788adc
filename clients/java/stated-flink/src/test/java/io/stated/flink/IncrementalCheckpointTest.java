package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.RunnableFuture;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.state.MapState;
import org.apache.flink.api.common.state.MapStateDescriptor;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeutils.base.IntSerializer;
import org.apache.flink.api.common.typeutils.base.StringSerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.checkpoint.CheckpointOptions;
import org.apache.flink.runtime.checkpoint.CheckpointType;
import org.apache.flink.runtime.operators.testutils.MockEnvironment;
import org.apache.flink.runtime.operators.testutils.MockEnvironmentBuilder;
import org.apache.flink.runtime.state.BackendBuildingException;
import org.apache.flink.runtime.state.CheckpointStorageLocationReference;
import org.apache.flink.runtime.state.CheckpointableKeyedStateBackend;
import org.apache.flink.runtime.state.IncrementalKeyedStateHandle.HandleAndLocalPath;
import org.apache.flink.runtime.state.IncrementalRemoteKeyedStateHandle;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyGroupRangeAssignment;
import org.apache.flink.runtime.state.KeyedStateBackendParametersImpl;
import org.apache.flink.runtime.state.KeyedStateHandle;
import org.apache.flink.runtime.state.PlaceholderStreamStateHandle;
import org.apache.flink.runtime.state.SharedStateRegistryImpl;
import org.apache.flink.runtime.state.SnapshotResult;
import org.apache.flink.runtime.state.StateBackend;
import org.apache.flink.runtime.state.VoidNamespace;
import org.apache.flink.runtime.state.VoidNamespaceSerializer;
import org.apache.flink.runtime.state.filesystem.FileStateHandle;
import org.apache.flink.runtime.state.memory.MemCheckpointStreamFactory;
import org.apache.flink.runtime.state.ttl.TtlTimeProvider;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * stated's incremental checkpoints as Flink handles, against a real daemon with {@code
 * --external-dir}, with Flink's own {@link SharedStateRegistryImpl} in the JobManager's part:
 * checkpoints are {@link IncrementalRemoteKeyedStateHandle}s whose files are Flink file handles; a
 * checkpoint after a confirmed one reuses its shared files as placeholders that the registry
 * resolves; a restore from the handle gets every entry back, also rescaled to two subtasks (the
 * daemon clips by key group); a {@code FULL_CHECKPOINT} reuses nothing; and once Flink subsumes and
 * discards the checkpoints, the registry and the handles delete every file the daemon wrote.
 *
 * <p>The first keys go to key groups 0-126 and the later changes to 127 alone, so that Pebble
 * writes the changes as an SST of their own instead of compacting the store's few SSTs together,
 * which would leave nothing to reuse (as api/external_test.go does).
 */
@Tag("daemon-views")
class IncrementalCheckpointTest {
  private static final int MAX = 128;
  @RegisterExtension static final TestDaemon DAEMON = TestDaemon.withExternalDir();
  private JobID job = new JobID();

  private final ValueStateDescriptor<String> valueDesc =
      new ValueStateDescriptor<>("v", StringSerializer.INSTANCE);
  private final MapStateDescriptor<String, Integer> mapDesc =
      new MapStateDescriptor<>("m", StringSerializer.INSTANCE, IntSerializer.INSTANCE);

  private static StateBackend stated(boolean incremental) {
    Configuration c = new Configuration();
    c.set(StatedOptions.SOCKET, DAEMON.socket());
    c.set(StatedOptions.BACKEND_KIND, "lsm");
    c.set(StatedOptions.INCREMENTAL, incremental);
    return new StatedStateBackendFactory().createFromConfig(c, null);
  }

  private CheckpointableKeyedStateBackend<Integer> open(
      StateBackend b, KeyGroupRange range, Collection<KeyedStateHandle> handles) throws Exception {
    MockEnvironment env = new MockEnvironmentBuilder().build();
    return b.createKeyedStateBackend(
        new KeyedStateBackendParametersImpl<>(
            env,
            job,
            "op",
            IntSerializer.INSTANCE,
            MAX,
            range,
            env.getTaskKvStateRegistry(),
            TtlTimeProvider.DEFAULT,
            new UnregisteredMetricsGroup(),
            (name, value) -> {},
            handles,
            new CloseableRegistry(),
            1.0));
  }

  private static int keyGroup(int key) {
    return KeyGroupRangeAssignment.assignToKeyGroup(key, MAX);
  }

  /** Writes value and map state for the keys in [from, to) whose key group is in [kgFrom, kgTo]. */
  private void write(
      CheckpointableKeyedStateBackend<Integer> b,
      int from,
      int to,
      int kgFrom,
      int kgTo,
      String round,
      Map<Integer, String> expect)
      throws Exception {
    ValueState<String> v =
        b.getPartitionedState(VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, valueDesc);
    MapState<String, Integer> m =
        b.getPartitionedState(VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, mapDesc);
    for (int k = from; k < to; k++) {
      int kg = keyGroup(k);
      if (kg < kgFrom || kg > kgTo) {
        continue;
      }
      b.setCurrentKey(k);
      String s = "value-" + k + "-" + round + "-" + "x".repeat(64);
      v.update(s);
      m.put("k" + k, k);
      expect.put(k, s);
    }
  }

  /** Reads back every key of {@code expect} in the backend's key groups, and no other key. */
  private void check(CheckpointableKeyedStateBackend<Integer> b, Map<Integer, String> expect)
      throws Exception {
    ValueState<String> v =
        b.getPartitionedState(VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, valueDesc);
    MapState<String, Integer> m =
        b.getPartitionedState(VoidNamespace.INSTANCE, VoidNamespaceSerializer.INSTANCE, mapDesc);
    int mine = 0;
    for (Map.Entry<Integer, String> e : expect.entrySet()) {
      if (!b.getKeyGroupRange().contains(keyGroup(e.getKey()))) {
        continue;
      }
      mine++;
      b.setCurrentKey(e.getKey());
      assertThat(v.value()).as("value of key " + e.getKey()).isEqualTo(e.getValue());
      assertThat(m.get("k" + e.getKey())).as("map of key " + e.getKey()).isEqualTo(e.getKey());
    }
    // One value and one map entry per key: nothing of other key groups or later writes.
    assertThat(((StatedKeyedStateBackend<Integer>) b).numKeyValueStateEntries())
        .as("entries in " + b.getKeyGroupRange())
        .isEqualTo(2 * mine);
  }

  private static IncrementalRemoteKeyedStateHandle snapshot(
      CheckpointableKeyedStateBackend<Integer> b, long id, boolean full) throws Exception {
    RunnableFuture<SnapshotResult<KeyedStateHandle>> f =
        b.snapshot(
            id,
            0,
            new MemCheckpointStreamFactory(64 << 20),
            full
                ? new CheckpointOptions(
                    CheckpointType.FULL_CHECKPOINT, CheckpointStorageLocationReference.getDefault())
                : CheckpointOptions.forCheckpointWithDefaultLocation());
    f.run();
    KeyedStateHandle h = f.get().getJobManagerOwnedSnapshot();
    assertThat(h).isInstanceOf(IncrementalRemoteKeyedStateHandle.class);
    IncrementalRemoteKeyedStateHandle ih = (IncrementalRemoteKeyedStateHandle) h;
    assertThat(ih.getCheckpointId()).isEqualTo(id);
    assertThat(ih.getKeyGroupRange()).isEqualTo(b.getKeyGroupRange());
    assertThat(ih.getSharedState()).as("shared files of " + id).isNotEmpty();
    assertThat(ih.getPrivateState()).as("private files of " + id).isNotEmpty();
    return ih;
  }

  private static List<HandleAndLocalPath> placeholders(IncrementalRemoteKeyedStateHandle h) {
    return h.getSharedState().stream()
        .filter(f -> f.getHandle() instanceof PlaceholderStreamStateHandle)
        .collect(Collectors.toList());
  }

  /**
   * Completes checkpoints 1, 2, ... as Flink does (register, complete, notify, then subsume and
   * discard the one before) until three in a row reference the same shared files, and returns the
   * last: the base of a test that wants its next checkpoint to reuse files. Pebble compacts a fresh
   * load in the background; a base taken while that runs shares no file with the checkpoint after
   * it, which on a loaded machine a fixed sleep did not rule out. Three equal checkpoints 300 ms
   * apart mean no compaction finished between them, and with no writes none starts.
   */
  private IncrementalRemoteKeyedStateHandle settledBase(
      StatedKeyedStateBackend<Integer> b, SharedStateRegistryImpl registry) throws Exception {
    IncrementalRemoteKeyedStateHandle prev = null;
    int same = 0;
    for (long id = 1; id <= 40; id++) {
      IncrementalRemoteKeyedStateHandle h = snapshot(b, id, false);
      if (prev == null) {
        assertThat(placeholders(h)).as("nothing confirmed before 1").isEmpty();
      }
      for (Path f : files(h)) {
        assertThat(f).startsWith(DAEMON.externalDir().resolve(job.toString())).exists();
      }
      registry.registerAll(List.of(h), id);
      registry.checkpointCompleted(id);
      b.notifyCheckpointComplete(id);
      if (prev != null) {
        // Flink subsumes the one before: the registry deletes its shared
        // files no later checkpoint uses, the handle its private ones and
        // meta stream.
        b.notifyCheckpointSubsumed(id - 1);
        registry.unregisterUnusedState(id);
        prev.discardState();
        Set<Path> gone = new HashSet<>(files(prev));
        gone.removeAll(files(h));
        for (Path f : gone) {
          assertThat(f).as("a file of subsumed checkpoint %d only", id - 1).doesNotExist();
        }
        same = sharedNames(prev).equals(sharedNames(h)) ? same + 1 : 0;
        if (same == 2) {
          return h;
        }
      }
      prev = h;
      Thread.sleep(300);
    }
    throw new AssertionError(
        "the daemon's store still changed after 40 checkpoints without writes");
  }

  /** A test body; {@link StoreCompacted} means Pebble left it nothing to show. */
  private interface Body {
    void run() throws Exception;
  }

  /**
   * Pebble compacted the base checkpoint's SSTs away before a checkpoint that should reuse them, so
   * there was nothing to reuse: the store's doing, not the backend's, and the attempt shows
   * nothing.
   */
  private static final class StoreCompacted extends Exception {
    private static final long serialVersionUID = 1L;

    StoreCompacted(long base, IncrementalRemoteKeyedStateHandle h) {
      super(
          "the store compacted base "
              + base
              + "'s SSTs away before "
              + h.getCheckpointId()
              + ", which holds "
              + sharedNames(h));
    }
  }

  /**
   * Runs {@code body} with a fresh job, again (at most three times in all) while Pebble compacts
   * the base away under it: its background compactions of a store this small are not the test's to
   * time, and a fixed sleep did not rule them out on a loaded machine. A backend that reuses
   * nothing while the base's SSTs are still in the store fails every attempt.
   */
  private void retryIfCompacted(Body body) throws Exception {
    StoreCompacted last = null;
    for (int attempt = 0; attempt < 3; attempt++) {
      job = new JobID();
      try {
        body.run();
        return;
      } catch (StoreCompacted e) {
        last = e;
      }
    }
    throw new AssertionError("every attempt lost its base to a compaction", last);
  }

  /**
   * Whether {@code later} holds none of the SSTs of {@code base} (by the store's file number, which
   * names an SST whether it was reused or written anew): the store compacted them away.
   */
  private static boolean compactedAway(
      IncrementalRemoteKeyedStateHandle base, IncrementalRemoteKeyedStateHandle later) {
    Set<String> numbers = sstNumbers(later);
    return sstNumbers(base).stream().noneMatch(numbers::contains);
  }

  /** The store's names of the SSTs of {@code h} ("000004.sst"), without the upload's prefix. */
  private static Set<String> sstNumbers(IncrementalRemoteKeyedStateHandle h) {
    return sharedNames(h).stream()
        .map(p -> p.substring(p.lastIndexOf('-') + 1))
        .collect(Collectors.toSet());
  }

  private static Set<String> sharedNames(IncrementalRemoteKeyedStateHandle h) {
    return h.getSharedState().stream()
        .map(HandleAndLocalPath::getLocalPath)
        .collect(Collectors.toSet());
  }

  /** The files' paths on disk (placeholders excluded). */
  private static Set<Path> files(IncrementalRemoteKeyedStateHandle h) {
    Set<Path> out = new HashSet<>();
    for (List<HandleAndLocalPath> l : List.of(h.getSharedState(), h.getPrivateState())) {
      for (HandleAndLocalPath f : l) {
        if (f.getHandle() instanceof FileStateHandle) {
          out.add(Path.of(((FileStateHandle) f.getHandle()).getFilePath().toUri()));
        }
      }
    }
    return out;
  }

  /** Every regular file under the job's root in the external directory. */
  private Set<Path> filesOnDisk() throws IOException {
    Path root = DAEMON.externalDir().resolve(job.toString());
    if (!Files.exists(root)) {
      return Set.of();
    }
    try (Stream<Path> s = Files.walk(root)) {
      return s.filter(Files::isRegularFile).collect(Collectors.toSet());
    }
  }

  @Test
  void incrementalCheckpointsRestoreRescaleAndAreDeletedByFlink() throws Exception {
    retryIfCompacted(this::restoreRescaleAndDelete);
  }

  private void restoreRescaleAndDelete() throws Exception {
    SharedStateRegistryImpl registry = new SharedStateRegistryImpl();
    Map<Integer, String> expect = new TreeMap<>();
    StatedKeyedStateBackend<Integer> b =
        (StatedKeyedStateBackend<Integer>)
            open(stated(true), new KeyGroupRange(0, MAX - 1), List.of());
    write(b, 0, 4000, 0, MAX - 2, "a", expect);

    IncrementalRemoteKeyedStateHandle h2 = settledBase(b, registry);
    long n = h2.getCheckpointId();

    // A change of one key group: the next checkpoint reuses the base's files
    // as placeholders and writes only the change.
    Map<Integer, String> at3 = new TreeMap<>(expect);
    write(b, 4000, 4400, MAX - 1, MAX - 1, "b", at3);
    IncrementalRemoteKeyedStateHandle h3 = snapshot(b, n + 1, false);
    if (compactedAway(h2, h3)) {
      b.dispose();
      throw new StoreCompacted(n, h3);
    }
    Set<String> shared2 =
        h2.getSharedState().stream()
            .map(HandleAndLocalPath::getLocalPath)
            .collect(Collectors.toSet());
    assertThat(placeholders(h3).stream().map(HandleAndLocalPath::getLocalPath))
        .as("%d reuses %d's shared files", n + 1, n)
        .isNotEmpty()
        .allMatch(shared2::contains);
    assertThat(h3.getCheckpointedSize() * 4)
        .as("bytes %d wrote against its full size %d", n + 1, h3.getStateSize())
        .isLessThan(h3.getStateSize());
    registry.registerAll(List.of(h3), n + 1);
    assertThat(placeholders(h3)).as("the registry replaced the placeholders").isEmpty();
    registry.checkpointCompleted(n + 1);
    b.notifyCheckpointComplete(n + 1);

    // Writes after 3 are in no restore of it.
    write(b, 0, 50, 0, MAX - 1, "after", new TreeMap<>());
    b.dispose();

    // Restore, whole and rescaled to two subtasks.
    for (KeyGroupRange r :
        List.of(
            new KeyGroupRange(0, MAX - 1), new KeyGroupRange(0, 40), new KeyGroupRange(41, 127))) {
      CheckpointableKeyedStateBackend<Integer> rb = open(stated(true), r, List.of(h3));
      try {
        check(rb, at3);
      } finally {
        rb.dispose();
      }
    }

    // A NO_CLAIM restore's first checkpoint: FULL_CHECKPOINT reuses nothing.
    CheckpointableKeyedStateBackend<Integer> nb =
        open(stated(true), new KeyGroupRange(0, MAX - 1), List.of(h3));
    IncrementalRemoteKeyedStateHandle h4;
    try {
      h4 = snapshot(nb, n + 2, true);
    } finally {
      nb.dispose();
    }
    Set<String> shared3 =
        h3.getSharedState().stream()
            .map(HandleAndLocalPath::getLocalPath)
            .collect(Collectors.toSet());
    assertThat(placeholders(h4)).isEmpty();
    assertThat(h4.getSharedState().stream().map(HandleAndLocalPath::getLocalPath))
        .noneMatch(shared3::contains);
    assertThat(h4.getCheckpointedSize()).isGreaterThanOrEqualTo(h4.getStateSize() - 4096);

    // Flink discards everything: no file the daemon wrote is left.
    assertThat(filesOnDisk()).isNotEmpty();
    registry.registerAll(List.of(h4), n + 2);
    registry.unregisterUnusedState(Long.MAX_VALUE);
    for (IncrementalRemoteKeyedStateHandle h : List.of(h2, h3, h4)) {
      h.discardState();
    }
    assertThat(filesOnDisk()).as("files left after Flink discarded every checkpoint").isEmpty();
  }

  /**
   * Flink's completion notification of one checkpoint never reaches the task (the JobManager's
   * confirmCheckpoint RPC, which also carries the subsumption of the one before, is lost), while
   * the JobManager completes it, subsumes its predecessor and discards that one's files as usual.
   * The next checkpoint then reuses the files of the last checkpoint the backend was told of, which
   * are still registered (a file still in the LSM was in every checkpoint since, so Flink's
   * registry kept it), and writes the lost one's changes again: a restore from it is exact. Once
   * Flink completes that next checkpoint and subsumes the lost one, no file of the lost one is
   * left; the directory holds exactly the files of the retained checkpoint.
   */
  @Test
  void lostCompletionNotificationLosesAndLeaksNothing() throws Exception {
    retryIfCompacted(this::lostCompletion);
  }

  private void lostCompletion() throws Exception {
    SharedStateRegistryImpl registry = new SharedStateRegistryImpl();
    Map<Integer, String> expect = new TreeMap<>();
    StatedKeyedStateBackend<Integer> b =
        (StatedKeyedStateBackend<Integer>)
            open(stated(true), new KeyGroupRange(0, MAX - 1), List.of());
    IncrementalRemoteKeyedStateHandle h2;
    IncrementalRemoteKeyedStateHandle h3;
    IncrementalRemoteKeyedStateHandle h4;
    Set<Path> new3;
    Map<Integer, String> at4 = new TreeMap<>();
    try {
      write(b, 0, 4000, 0, MAX - 2, "a", expect);
      // As above: "2" is the base on the settled store that Flink completes.
      h2 = settledBase(b, registry);
      long n = h2.getCheckpointId();

      // 3 completes in the JobManager, which subsumes and discards 2, but
      // the task never hears of it: no notifyCheckpointComplete(3), no
      // notifyCheckpointSubsumed(2).
      write(b, 4000, 4400, MAX - 1, MAX - 1, "b", expect);
      h3 = snapshot(b, n + 1, false);
      new3 = files(h3);
      if (compactedAway(h2, h3)) {
        throw new StoreCompacted(n, h3);
      }
      assertThat(placeholders(h3)).as("3 reuses 2's files").isNotEmpty();
      registry.registerAll(List.of(h3), n + 1);
      registry.checkpointCompleted(n + 1);
      registry.unregisterUnusedState(n + 1);
      h2.discardState();

      // 4 reuses the files of 2, the last checkpoint the backend knows to be
      // complete, which 3 still references, and none of 3's own.
      at4.putAll(expect);
      write(b, 4400, 4800, MAX - 1, MAX - 1, "c", at4);
      h4 = snapshot(b, n + 2, false);
      if (compactedAway(h2, h4)) {
        throw new StoreCompacted(n, h4);
      }
      Set<String> shared2 =
          h2.getSharedState().stream()
              .map(HandleAndLocalPath::getLocalPath)
              .collect(Collectors.toSet());
      assertThat(placeholders(h4).stream().map(HandleAndLocalPath::getLocalPath))
          .as("4 reuses files of 2, the last checkpoint the task was told of")
          .isNotEmpty()
          .allMatch(shared2::contains);
      assertThat(files(h4)).as("4 references no file 3 wrote").doesNotContainAnyElementsOf(new3);
      registry.registerAll(List.of(h4), n + 2);
      assertThat(placeholders(h4)).as("every reused file is registered").isEmpty();
      registry.checkpointCompleted(n + 2);
      b.notifyCheckpointComplete(n + 2);
      b.notifyCheckpointSubsumed(n + 1);
      registry.unregisterUnusedState(n + 2);
      h3.discardState();

      // Nothing of the checkpoint whose notification was lost is left: the
      // directory holds exactly the retained checkpoint's files.
      for (Path f : new3) {
        assertThat(f).as("a file of checkpoint 3, whose notification was lost").doesNotExist();
      }
      assertThat(filesOnDisk())
          .as("files on disk once 4 is the only checkpoint Flink retains")
          .isEqualTo(files(h4));
    } finally {
      b.dispose();
    }

    // Nothing lost: a restore from 4 has every change, 3's too.
    CheckpointableKeyedStateBackend<Integer> rb =
        open(stated(true), new KeyGroupRange(0, MAX - 1), List.of(h4));
    try {
      check(rb, at4);
    } finally {
      rb.dispose();
    }
    registry.unregisterUnusedState(Long.MAX_VALUE);
    h4.discardState();
    assertThat(filesOnDisk()).as("files left after Flink discarded every checkpoint").isEmpty();
  }

  /**
   * A task that ends while its last snapshot's upload runs (a failover's first step, or a cancel)
   * never hands that snapshot to Flink: dispose abandons it, and afterwards the directory holds
   * exactly the files of the checkpoint Flink completed, whether the upload was stopped or had
   * finished (the abandon comes at once, or after a while).
   */
  @Test
  void disposeDuringAnUploadLeavesOnlyTheCompletedCheckpoint() throws Exception {
    for (long delay : new long[] {0, 30, 300}) {
      job = new JobID();
      SharedStateRegistryImpl registry = new SharedStateRegistryImpl();
      StatedKeyedStateBackend<Integer> b =
          (StatedKeyedStateBackend<Integer>)
              open(stated(true), new KeyGroupRange(0, MAX - 1), List.of());
      IncrementalRemoteKeyedStateHandle h1;
      try {
        write(b, 0, 2000, 0, MAX - 1, "a", new TreeMap<>());
        h1 = snapshot(b, 1, false);
        registry.registerAll(List.of(h1), 1);
        registry.checkpointCompleted(1);
        b.notifyCheckpointComplete(1);
        write(b, 2000, 40000, 0, MAX - 1, "b", new TreeMap<>());
        // The synchronous part only: the daemon uploads, nobody awaits.
        b.snapshot(
            2,
            0,
            new MemCheckpointStreamFactory(64 << 20),
            CheckpointOptions.forCheckpointWithDefaultLocation());
        Thread.sleep(delay);
      } finally {
        b.dispose();
      }
      assertThat(filesOnDisk())
          .as("files once the task ended %d ms into checkpoint 2's upload", delay)
          .isEqualTo(files(h1));
      registry.unregisterUnusedState(Long.MAX_VALUE);
      h1.discardState();
      assertThat(filesOnDisk()).as("files once Flink discarded checkpoint 1").isEmpty();
    }
  }

  @Test
  void incrementalHandlesNeedTheIncrementalOption() throws Exception {
    CheckpointableKeyedStateBackend<Integer> b =
        open(stated(true), new KeyGroupRange(0, MAX - 1), List.of());
    IncrementalRemoteKeyedStateHandle h;
    try {
      write(b, 0, 100, 0, MAX - 1, "a", new TreeMap<>());
      h = snapshot(b, 1, false);
    } finally {
      b.dispose();
    }
    List<KeyedStateHandle> handles = new ArrayList<>(List.of(h));
    assertThatThrownBy(() -> open(stated(false), new KeyGroupRange(0, MAX - 1), handles))
        .isInstanceOf(BackendBuildingException.class)
        .hasMessageContaining(StatedOptions.INCREMENTAL.key());
    h.discardState();
  }
}
