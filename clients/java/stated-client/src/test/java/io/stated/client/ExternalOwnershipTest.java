package io.stated.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.google.protobuf.ByteString;
import io.grpc.Status;
import io.stated.api.v1.BackendKind;
import io.stated.api.v1.KeyHash;
import io.stated.api.v1.Op;
import io.stated.api.v1.OpType;
import io.stated.api.v1.OpenRequest;
import io.stated.api.v1.Result;
import io.stated.api.v1.StateDescriptor;
import io.stated.api.v1.StateKind;
import io.stated.api.v1.TaskId;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestInstance;

/**
 * The externally owned mode (docs/protocol.md, section 11) through the Java client against a real
 * daemon started with {@code --external-dir}: incremental snapshots whose shared files the next
 * snapshot reuses once confirmed, a full checkpoint that reuses none, a restore into a new job id
 * from the task handle that gets the exact entries back, and the daemon's errors as exceptions. As
 * api/external_test.go does, the writes after a base snapshot go to a key group of their own (127)
 * beside the loaded ones (0-126), so that Pebble moves their SST down instead of compacting the
 * store's few small SSTs together, which would leave nothing to reuse.
 */
@TestInstance(TestInstance.Lifecycle.PER_CLASS)
class ExternalOwnershipTest {
  private static final int MAX_PAR = 128;

  private Daemon daemon;
  private Path extDir;
  private StatedClient c;

  @BeforeAll
  void start() throws Exception {
    // The external directory must lie outside the daemon's checkpoint store (under its data dir),
    // whose sweep deletes what the catalog does not know: a temporary directory of its own.
    extDir = Files.createTempDirectory("stated-java-ext-").toRealPath();
    daemon = new Daemon("--external-dir", extDir.toString());
    daemon.start();
    c = daemon.client();
  }

  @AfterAll
  void stop() throws Exception {
    if (c != null) {
      c.close();
    }
    if (daemon != null) {
      daemon.close();
    }
    if (extDir != null) {
      try (Stream<Path> s = Files.walk(extDir)) {
        s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
      }
    }
  }

  private static OpenRequest spec(String job) {
    return OpenRequest.newBuilder()
        .setTask(TaskId.newBuilder().setJob(job).setOperator("op").setSubtask(0))
        .setParallelism(1)
        .setMaxParallelism(MAX_PAR)
        .setBackendKind(BackendKind.BACKEND_KIND_LSM)
        .addStates(
            StateDescriptor.newBuilder().setName("v").setKind(StateKind.STATE_KIND_VALUE).build())
        .setKeyHash(KeyHash.KEY_HASH_FNV1A_MURMUR)
        .build();
  }

  private static byte[] key(int i) {
    return ("key" + i).getBytes(StandardCharsets.UTF_8);
  }

  /**
   * Writes key{from}..key{to-1} whose key group is in [kgFrom, kgTo] with value "v{i}-{round}",
   * records them in {@code expect}, and returns how many it wrote.
   */
  private static int put(
      Instance inst,
      int kgFrom,
      int kgTo,
      int from,
      int to,
      String round,
      Map<String, String> expect) {
    List<Op> ops = new ArrayList<>();
    int n = 0;
    for (int i = from; i < to; i++) {
      int kg = KeyGroups.keyGroup(key(i), MAX_PAR);
      if (kg < kgFrom || kg > kgTo) {
        continue;
      }
      String v = "v" + i + "-" + round;
      ops.add(
          inst.op(OpType.OP_TYPE_PUT, "v", key(i)).setValue(ByteString.copyFromUtf8(v)).build());
      expect.put("key" + i, v);
      n++;
      if (ops.size() == 1000) {
        StatedException.await(inst.send(ops)).check();
        ops = new ArrayList<>();
      }
    }
    if (!ops.isEmpty()) {
      StatedException.await(inst.send(ops)).check();
    }
    return n;
  }

  /** Snapshot {@code id} as a barrier, then its files with AwaitSnapshot, checked on disk. */
  private OwnedSnapshot snap(Instance inst, long id, boolean full) throws Exception {
    StatedException.await(inst.snapshotExternal(id, full));
    OwnedSnapshot s = StatedException.await(inst.awaitSnapshot(id));
    assertEquals(id, s.checkpointId());
    assertFalse(s.taskHandle().isEmpty(), "snapshot " + id + " has no task handle");
    assertFalse(s.files().isEmpty(), "snapshot " + id + " lists no file");
    long total = 0;
    for (OwnedSnapshot.File f : s.files()) {
      Path loc = Path.of(f.location());
      assertEquals(extDir.resolve(f.path()), loc, f.toString());
      assertEquals(f.size(), Files.size(loc), f.toString());
      total += f.size();
    }
    assertEquals(s.fullSize(), total, "snapshot " + id + ": full size vs. its files");
    return s;
  }

  @Test
  void incrementalSnapshotsFullCheckpointAndRestoreFromHandles() throws Exception {
    String job = "jext";
    String root = "ckpts/" + job;
    Map<String, String> expect = new TreeMap<>();
    Instance inst = StatedException.await(c.openExternal(spec(job), root, List.of()));
    assertTrue(put(inst, 0, 126, 0, 5000, "a", expect) > 4000);

    // Snapshot 1 flushes the load and Pebble compacts it at once into an empty base level; the
    // store settles before the base (2) the test checks, as a long-running task's store has.
    OwnedSnapshot s1 = snap(inst, 1, false);
    Thread.sleep(300);
    OwnedSnapshot s2 = snap(inst, 2, false);
    for (OwnedSnapshot s : List.of(s1, s2)) {
      for (OwnedSnapshot.File f : s.files()) {
        String want = f.shared() ? root + "/shared/" : root + "/chk-" + s.checkpointId() + "/";
        assertTrue(f.path().startsWith(want), f + " is not under " + want);
      }
      // Nothing is confirmed yet: every file is written anew.
      assertEquals(s.fullSize(), s.checkpointedSize(), "snapshot " + s.checkpointId());
    }
    assertFalse(s2.sharedFiles().isEmpty(), "snapshot 2 lists no shared file: " + s2.files());
    assertFalse(s2.privateFiles().isEmpty(), "snapshot 2 lists no private file: " + s2.files());
    StatedException.await(inst.confirmSnapshot(2));

    // A few more writes, in a key group of their own: snapshot 3 reuses every shared file of the
    // confirmed 2 and writes only the new ones.
    assertTrue(put(inst, 127, 127, 5000, 10000, "b", expect) > 0);
    Map<String, String> at3 = new TreeMap<>(expect);
    OwnedSnapshot s3 = snap(inst, 3, false);
    assertTrue(
        s3.sharedPaths().containsAll(s2.sharedPaths()),
        "snapshot 3 does not reuse every shared file of 2:\n" + s2.files() + "\n" + s3.files());
    assertTrue(
        s3.sharedPaths().size() > s2.sharedPaths().size(),
        "snapshot 3 lists no new shared file: " + s3.files());
    long newBytes = 0;
    for (OwnedSnapshot.File f : s3.files()) {
      if (!s2.sharedPaths().contains(f.path())) {
        newBytes += f.size();
      }
    }
    assertEquals(
        newBytes, s3.checkpointedSize(), "snapshot 3 wrote other bytes than its new files");
    assertTrue(
        s3.checkpointedSize() * 5 < s3.fullSize(),
        "snapshot 3 wrote " + s3.checkpointedSize() + " of " + s3.fullSize() + " bytes");

    // A full checkpoint (after a NO_CLAIM restore) reuses nothing, though 3 is confirmed.
    StatedException.await(inst.confirmSnapshot(3));
    put(inst, 0, MAX_PAR - 1, 5050, 5060, "c", expect);
    OwnedSnapshot s4 = snap(inst, 4, true);
    Set<String> reused = new HashSet<>(s4.sharedPaths());
    reused.retainAll(s3.sharedPaths());
    assertTrue(reused.isEmpty(), "the full checkpoint reuses " + reused);
    assertEquals(s4.fullSize(), s4.checkpointedSize(), "the full checkpoint's bytes written");

    // Confirming a checkpoint the instance never snapshotted is an error naming it.
    StatedException e =
        assertThrows(StatedException.class, () -> StatedException.await(inst.confirmSnapshot(999)));
    assertEquals(Status.Code.NOT_FOUND, e.code(), e.getMessage());
    assertTrue(e.getMessage().contains("999"), e.getMessage());
    // Forgetting deletes no file; forgetting an unknown checkpoint succeeds.
    StatedException.await(inst.forgetSnapshot(4));
    StatedException.await(inst.forgetSnapshot(12345));
    for (OwnedSnapshot.File f : s4.files()) {
      assertTrue(Files.exists(Path.of(f.location())), "forgetting 4 deleted " + f);
    }
    // Forgotten, 4 cannot be awaited any more.
    e = assertThrows(StatedException.class, () -> StatedException.await(inst.awaitSnapshot(4)));
    assertEquals(Status.Code.NOT_FOUND, e.code(), e.getMessage());
    // Abandoning a finished snapshot answers with it (its files are the client's to delete);
    // abandoning an unknown one with nothing.
    StatedException.await(inst.snapshotExternal(5, false));
    StatedException.await(inst.awaitSnapshot(5));
    OwnedSnapshot a5 = StatedException.await(inst.abandonSnapshot(5));
    assertEquals(5, a5.checkpointId());
    assertFalse(a5.files().isEmpty(), "the abandoned snapshot lists no file");
    assertEquals(null, StatedException.await(inst.abandonSnapshot(5)), "abandoned twice");
    e = assertThrows(StatedException.class, () -> StatedException.await(inst.awaitSnapshot(5)));
    assertEquals(Status.Code.NOT_FOUND, e.code(), e.getMessage());
    StatedException.await(inst.closeInstance());

    // Restore into a new job id from snapshot 3's handle (incremental: it references 2's shared
    // files): exactly the entries written before its barrier, none of the later ones.
    String newJob = "jext-restored";
    Instance r =
        StatedException.await(
            c.openExternal(spec(newJob), "ckpts/" + newJob, List.of(s3.taskHandle())));
    assertEquals(3, r.openResponse().getRestoredCheckpointId());
    List<Op> gets = new ArrayList<>();
    List<String> want = new ArrayList<>();
    for (int i = 0; i < 10000; i++) {
      gets.add(r.op(OpType.OP_TYPE_GET, "v", key(i)).build());
      want.add(at3.get("key" + i));
    }
    for (int from = 0; from < gets.size(); from += 1000) {
      List<Result> res =
          StatedException.await(r.send(gets.subList(from, from + 1000))).check().results();
      for (int j = 0; j < res.size(); j++) {
        String w = want.get(from + j);
        Result got = res.get(j);
        if (w == null) {
          assertFalse(got.getFound(), "key" + (from + j) + " was written after checkpoint 3");
        } else {
          assertTrue(got.getFound(), "key" + (from + j) + " is missing after the restore");
          assertEquals(w, got.getValue().toStringUtf8(), "key" + (from + j));
        }
      }
    }
    assertEquals((long) at3.size(), StatedException.await(r.countEntries("")));
    StatedException.await(r.closeInstance());
  }

  @Test
  void fullCheckpointOfTheDaemonsOwnInstanceIsRefused() throws Exception {
    Instance own = StatedException.await(c.open(spec("jown")));
    StatedException e =
        assertThrows(
            StatedException.class, () -> StatedException.await(own.snapshotExternal(1, true)));
    assertEquals(Status.Code.INVALID_ARGUMENT, e.code(), e.getMessage());
    assertTrue(e.getMessage().contains("externally owned"), e.getMessage());
    e = assertThrows(StatedException.class, () -> StatedException.await(own.confirmSnapshot(1)));
    assertEquals(Status.Code.INVALID_ARGUMENT, e.code(), e.getMessage());
    StatedException.await(own.closeInstance());
  }

  @Test
  void openWithABadRootNamesIt() {
    StatedException e =
        assertThrows(
            StatedException.class,
            () -> StatedException.await(c.openExternal(spec("jbad"), "/elsewhere", List.of())));
    assertEquals(Status.Code.INVALID_ARGUMENT, e.code(), e.getMessage());
    assertTrue(e.getMessage().contains("/elsewhere"), e.getMessage());
  }
}
