package io.stated.client;

import com.google.protobuf.ByteString;
import io.grpc.Status;
import io.stated.api.v1.ExternalFile;
import io.stated.api.v1.ExternalSnapshot;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * One snapshot of an externally owned instance (docs/protocol.md, section 11): the files belong to
 * the engine, which keeps {@link #taskHandle} in its own checkpoint metadata (and passes it back to
 * {@link StatedClient#openExternal} to restore), reference-counts the {@link File#shared} files and
 * deletes every file when it discards the checkpoint. The daemon deletes none of them.
 *
 * @param checkpointId the checkpoint the snapshot belongs to
 * @param taskHandle the daemon's handle of the snapshot, opaque to the engine (JSON today)
 * @param files every file the handle references, the ones reused from an earlier checkpoint too
 * @param checkpointedSize the bytes this snapshot wrote (its new files)
 * @param fullSize the size of all its files
 */
public record OwnedSnapshot(
    long checkpointId,
    ByteString taskHandle,
    List<OwnedSnapshot.File> files,
    long checkpointedSize,
    long fullSize) {

  /**
   * One file of an {@link OwnedSnapshot}.
   *
   * @param path the file's name relative to the daemon's external directory (as the task handle
   *     names it): {@code <root>/shared/...} for shared files, {@code
   *     <root>/chk-<id>/<task>-<name>} for private ones
   * @param location its absolute path, where the engine reaches it
   * @param size its length in bytes
   * @param shared whether later snapshots of the instance may reuse it (so the engine counts its
   *     references, Flink's shared state); otherwise private to this snapshot
   */
  public record File(String path, String location, long size, boolean shared) {
    public File {
      Objects.requireNonNull(path, "path");
      Objects.requireNonNull(location, "location");
    }
  }

  public OwnedSnapshot {
    Objects.requireNonNull(taskHandle, "taskHandle");
    files = List.copyOf(files);
  }

  /**
   * The daemon's message as a record. An empty message (no handle or no file: what a daemon that
   * does not know the call's fields would answer) is refused, since it is never a snapshot.
   */
  public static OwnedSnapshot of(ExternalSnapshot s) {
    if (s == null || s.getTaskHandle().isEmpty() || s.getFilesCount() == 0) {
      throw new StatedException(
          Status.Code.INTERNAL,
          "the daemon answered with an empty external snapshot"
              + (s == null ? "" : " of checkpoint " + Long.toUnsignedString(s.getCheckpointId()))
              + " (no task handle or no file): it does not speak the externally owned mode of"
              + " protocol revision "
              + StatedClient.EXTERNAL_PROTOCOL_VERSION);
    }
    List<File> files = new ArrayList<>(s.getFilesCount());
    for (ExternalFile f : s.getFilesList()) {
      files.add(new File(f.getPath(), f.getLocation(), f.getSize(), f.getShared()));
    }
    return new OwnedSnapshot(
        s.getCheckpointId(), s.getTaskHandle(), files, s.getCheckpointedSize(), s.getFullSize());
  }

  /** The task handle as a new byte array. */
  public byte[] taskHandleBytes() {
    return taskHandle.toByteArray();
  }

  /** The shared files, in the daemon's order. */
  public List<File> sharedFiles() {
    return select(true);
  }

  /** The private files (this snapshot's alone), in the daemon's order. */
  public List<File> privateFiles() {
    return select(false);
  }

  /** The paths of the shared files. */
  public Set<String> sharedPaths() {
    Set<String> out = new LinkedHashSet<>();
    for (File f : files) {
      if (f.shared()) {
        out.add(f.path());
      }
    }
    return Collections.unmodifiableSet(out);
  }

  private List<File> select(boolean shared) {
    List<File> out = new ArrayList<>();
    for (File f : files) {
      if (f.shared() == shared) {
        out.add(f);
      }
    }
    return Collections.unmodifiableList(out);
  }
}
