package io.stated.flink.jobs;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.stream.Stream;

/**
 * Watches a Flink checkpoint directory while a job runs and records every daemon SST that appears
 * in a job's {@code shared/} directory: the evidence that the job's checkpoints were stated's
 * incremental ones. A watcher is needed because Flink deletes the files once it discards the
 * finished job's checkpoints.
 */
final class SharedFileWatcher implements AutoCloseable {
  private final Path dir;
  private final Set<Path> seen = ConcurrentHashMap.newKeySet();
  private final Thread thread;
  private volatile boolean stop;

  SharedFileWatcher(Path dir) {
    this.dir = dir;
    this.thread = new Thread(this::loop, "shared-file-watcher");
    thread.setDaemon(true);
    thread.start();
  }

  private void loop() {
    while (!stop) {
      scan();
      try {
        Thread.sleep(20);
      } catch (InterruptedException e) {
        return;
      }
    }
  }

  private void scan() {
    try (Stream<Path> s = Files.walk(dir)) {
      s.filter(p -> p.getFileName().toString().endsWith(".sst"))
          .filter(p -> p.getParent() != null && p.getParent().endsWith("shared"))
          .forEach(seen::add);
    } catch (NoSuchFileException | UncheckedIOException e) {
      // A file or directory Flink deleted during the walk: the next scan sees the rest.
    } catch (IOException e) {
      // Same: the directory is changing under the walk.
    }
  }

  /** The SSTs seen in a {@code shared/} directory so far. */
  Set<Path> seen() {
    scan();
    return Set.copyOf(seen);
  }

  @Override
  public void close() {
    stop = true;
    try {
      thread.join();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }
}
