package io.stated.flink;

import io.grpc.Status;
import io.stated.client.Instance;
import io.stated.client.OwnedSnapshot;
import io.stated.client.StatedException;
import java.io.File;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import org.apache.flink.core.fs.Path;
import org.apache.flink.runtime.state.IncrementalKeyedStateHandle.HandleAndLocalPath;
import org.apache.flink.runtime.state.IncrementalRemoteKeyedStateHandle;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.PlaceholderStreamStateHandle;
import org.apache.flink.runtime.state.StreamStateHandle;
import org.apache.flink.runtime.state.filesystem.FileStateHandle;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The Flink side of an externally owned instance (docs/protocol.md, section 11): turns the daemon's
 * snapshots into {@link IncrementalRemoteKeyedStateHandle}s and passes Flink's checkpoint
 * notifications on as ConfirmSnapshot and ForgetSnapshot.
 *
 * <p>A shared file the daemon reused from an earlier checkpoint goes into the handle as a {@link
 * PlaceholderStreamStateHandle}, as Flink's RocksDB backend does: Flink's JobManager replaces it by
 * the handle it registered already, and a handle discarded on the TaskManager before registration
 * (a declined checkpoint) deletes only the files this snapshot wrote, never those a completed
 * checkpoint holds. The daemon reuses only files of the checkpoint Flink last confirmed or of the
 * one restored from, whose handles Flink's {@code SharedStateRegistry} knows, so every placeholder
 * names a registered file.
 */
final class ExternalSnapshots {
  private static final Logger LOG = LoggerFactory.getLogger(ExternalSnapshots.class);

  /** Snapshots whose shared files are remembered at most (Flink subsumes long before). */
  private static final int MAX_REMEMBERED = 64;

  private final Instance inst;
  private final UUID backendId = UUID.randomUUID();

  /** The shared files (daemon paths) of the restored checkpoint(s): reusable until replaced. */
  private final Set<String> restoredShared;

  /** The shared files of each snapshot taken and not subsumed or aborted, by checkpoint id. */
  private final TreeMap<Long, Set<String>> sharedByCheckpoint = new TreeMap<>();

  /**
   * The daemon's id of each Flink checkpoint this backend snapshotted. The daemon wants every id
   * new for the instance, above the one it restored from, and at least 1; Flink's ids are that in a
   * job, but its tests snapshot checkpoint 0, or one id twice, or the restored one again. So the
   * daemon's id is Flink's unless that is not above the last one used, then the next free one.
   */
  private final TreeMap<Long, Long> daemonIds = new TreeMap<>();

  private long lastDaemonId;

  /**
   * Daemon ids of snapshots taken whose files Flink has not got in a handle yet. Until Flink has
   * them, nobody else deletes them: a snapshot that fails or is cancelled after the daemon wrote
   * its files, or is still running when the backend is disposed, is cleaned up here ({@link
   * #abandon}, {@link #abandonPending}). Whoever removes an id from here owns its files.
   */
  private final Set<Long> pending = new HashSet<>();

  ExternalSnapshots(Instance inst, Set<String> restoredShared) {
    this.inst = inst;
    this.restoredShared = Set.copyOf(restoredShared);
    // The daemon refuses the id it restored from, too.
    this.lastDaemonId = inst.openResponse().getRestoredCheckpointId();
  }

  Instance instance() {
    return inst;
  }

  /**
   * A new daemon id for a snapshot of Flink checkpoint {@code flinkId} (see {@link #daemonIds}).
   */
  synchronized long newDaemonId(long flinkId) {
    long id = Math.max(flinkId, lastDaemonId + 1);
    lastDaemonId = id;
    daemonIds.put(flinkId, id);
    pending.add(id);
    while (daemonIds.size() > MAX_REMEMBERED) {
      daemonIds.pollFirstEntry();
    }
    return id;
  }

  private synchronized Long daemonId(long flinkId) {
    return daemonIds.get(flinkId);
  }

  /** Takes {@code daemonId} out of {@link #pending}: true if it was there. */
  private synchronized boolean claim(long daemonId) {
    return pending.remove(daemonId);
  }

  /**
   * The snapshot of daemon id {@code daemonId} will not reach Flink (its asynchronous part failed
   * or was cancelled): deletes the files it wrote and forgets it. With {@code s} (the files are
   * known already) it deletes them; otherwise the daemon abandons it (stops a running upload, which
   * deletes what it wrote, and lists the files of one that had finished). Files it reused belong to
   * completed checkpoints and stay.
   */
  void abandon(long daemonId, OwnedSnapshot s) {
    if (!claim(daemonId)) {
      return;
    }
    if (s != null) {
      deleteNew(s);
      forgetDaemonId(daemonId);
      return;
    }
    abandonInDaemon(daemonId);
  }

  private CompletableFuture<OwnedSnapshot> abandonInDaemon(long daemonId) {
    return inst.abandonSnapshot(daemonId)
        .whenComplete(
            (r, err) -> {
              if (r != null) {
                deleteNew(r);
              } else if (err != null) {
                report("abandon", daemonId, err);
              }
            });
  }

  /**
   * Before the instance closes: abandons the snapshots whose files Flink has not got, e.g. one the
   * task's end cut short, waiting (at most {@code timeoutMillis} in all) for the daemon to stop
   * their uploads, not for the uploads to finish. A task's end, a failover's first step, so does
   * not wait for its last checkpoint's upload.
   */
  void abandonPending(long timeoutMillis) {
    List<Long> ids;
    synchronized (this) {
      ids = new ArrayList<>(pending);
      pending.clear();
    }
    if (ids.isEmpty()) {
      return;
    }
    long deadline =
        System.nanoTime() + java.util.concurrent.TimeUnit.MILLISECONDS.toNanos(timeoutMillis);
    try {
      // The abandon is a call of its own, which can overtake a snapshot's
      // barrier still queued on the batch stream; the daemon then knows no
      // snapshot to stop, takes the barrier after, and its finished files
      // reach nobody. An empty request is answered after every request
      // sent before it: the barriers are then in the daemon.
      inst.send(List.of()).get(timeoutMillis, java.util.concurrent.TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (Exception e) {
      // The stream failed (the daemon is gone: it stops its uploads) or
      // did not drain in time; abandon all the same.
      LOG.debug("stated: draining the stream before abandoning {}: {}", ids, e.getMessage());
    }
    long left =
        Math.max(
            0, java.util.concurrent.TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime()));
    List<CompletableFuture<OwnedSnapshot>> all = new ArrayList<>();
    for (long id : ids) {
      all.add(abandonInDaemon(id));
    }
    try {
      CompletableFuture.allOf(all.toArray(new CompletableFuture<?>[0]))
          .get(left, java.util.concurrent.TimeUnit.MILLISECONDS);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } catch (Exception e) {
      // Failed or not stopped in time: the daemon stops it at close, and
      // a stopped upload deletes what it wrote (docs/flink.md).
      LOG.debug("stated: abandoning snapshots {}: {}", ids, e.getMessage());
    }
  }

  /** Deletes the files of {@code s} that it did not reuse from a checkpoint Flink holds. */
  private void deleteNew(OwnedSnapshot s) {
    Set<String> known = known();
    for (OwnedSnapshot.File f : s.files()) {
      if (f.shared() && known.contains(f.path())) {
        continue;
      }
      try {
        Path p = flinkPath(f.location());
        p.getFileSystem().delete(p, false);
      } catch (java.io.IOException e) {
        LOG.warn("stated: cannot delete {} of an abandoned snapshot: {}", f.location(), e);
      }
    }
  }

  /** The file handle of a daemon file, the same for the same file in every checkpoint. */
  static FileStateHandle fileHandle(OwnedSnapshot.File f) {
    return new FileStateHandle(flinkPath(f.location()), f.size());
  }

  /**
   * Flink's path of a daemon file: a URL as the daemon gives it for an external store
   * (s3://bucket/key, which Flink's S3 file system reaches), else a local path.
   */
  static Path flinkPath(String location) {
    return location.contains("://") ? new Path(location) : Path.fromLocalFile(new File(location));
  }

  /**
   * The Flink handle of snapshot {@code s} with meta stream {@code meta}, and remembers its shared
   * files as reusable by later snapshots.
   */
  IncrementalRemoteKeyedStateHandle handle(
      long flinkId, OwnedSnapshot s, KeyGroupRange range, StreamStateHandle meta) {
    if (!claim(s.checkpointId())) {
      // The backend was disposed meanwhile and deleted the files.
      throw new java.util.concurrent.CancellationException(
          "the snapshot of checkpoint " + flinkId + " was abandoned when the backend closed");
    }
    Set<String> known = known();
    List<HandleAndLocalPath> shared = new ArrayList<>();
    List<HandleAndLocalPath> priv = new ArrayList<>();
    for (OwnedSnapshot.File f : s.files()) {
      FileStateHandle h = fileHandle(f);
      if (!f.shared()) {
        priv.add(HandleAndLocalPath.of(h, f.path()));
      } else if (known.contains(f.path())) {
        shared.add(
            HandleAndLocalPath.of(
                new PlaceholderStreamStateHandle(h.getStreamStateHandleID(), f.size(), false),
                f.path()));
      } else {
        shared.add(HandleAndLocalPath.of(h, f.path()));
      }
    }
    synchronized (sharedByCheckpoint) {
      sharedByCheckpoint.put(flinkId, s.sharedPaths());
      while (sharedByCheckpoint.size() > MAX_REMEMBERED) {
        sharedByCheckpoint.pollFirstEntry();
      }
    }
    return new IncrementalRemoteKeyedStateHandle(
        backendId, range, flinkId, shared, priv, meta, s.checkpointedSize() + meta.getStateSize());
  }

  private Set<String> known() {
    Set<String> out = new HashSet<>(restoredShared);
    synchronized (sharedByCheckpoint) {
      for (Set<String> paths : sharedByCheckpoint.values()) {
        out.addAll(paths);
      }
    }
    return out;
  }

  /** Flink completed checkpoint {@code id}: later snapshots may reuse its files. */
  void confirm(long id) {
    Long d = daemonId(id);
    if (d == null) {
      // Not snapshotted by this backend (a savepoint, or before a restore).
      return;
    }
    inst.confirmSnapshot(d)
        .whenComplete(
            (r, err) -> {
              if (err != null) {
                report("confirm", id, err);
              }
            });
  }

  /**
   * Flink subsumed every checkpoint up to {@code id} ({@code upTo}) or aborted {@code id}: the
   * daemon reuses none of its files any more, and Flink may delete them.
   */
  void forget(long id, boolean upTo) {
    synchronized (sharedByCheckpoint) {
      if (upTo) {
        Iterator<Map.Entry<Long, Set<String>>> it =
            sharedByCheckpoint.headMap(id, true).entrySet().iterator();
        while (it.hasNext()) {
          it.next();
          it.remove();
        }
      } else {
        sharedByCheckpoint.remove(id);
      }
    }
    Long d = daemonId(id);
    if (d == null) {
      return;
    }
    synchronized (this) {
      if (pending.contains(d)) {
        // Aborted before its handle reached Flink (the asynchronous part
        // may never run): nobody else knows its files, so they are deleted
        // here before the daemon forgets which they were.
        abandon(d, null);
        return;
      }
    }
    forgetDaemonId(d);
  }

  private void forgetDaemonId(long d) {
    inst.forgetSnapshot(d)
        .whenComplete(
            (r, err) -> {
              if (err != null) {
                report("forget", d, err);
              }
            });
  }

  /**
   * A notification the daemon could not act on. {@code NOT_FOUND} is normal (a savepoint, which is
   * a full snapshot, or a checkpoint of the task's attempt before a restore); anything else costs
   * at most the reuse of files, never a file Flink holds, so it is logged and not thrown.
   */
  private static void report(String what, long id, Throwable err) {
    StatedException e = StatedException.from(err, null);
    if (e.code() == Status.Code.NOT_FOUND) {
      LOG.debug("stated: {} of checkpoint {}: {}", what, id, e.getMessage());
    } else {
      LOG.warn("stated: {} of checkpoint {} failed: {}", what, id, e.getMessage());
    }
  }
}
