package io.stated.flink;

import io.stated.client.Daemon;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.stream.Stream;

/**
 * A daemon started with {@code --external-dir} on a fresh temporary directory, for the tests of
 * stated's incremental checkpoints (whose files the daemon writes there). The directory is outside
 * the daemon's data dir, whose checkpoint sweep deletes what its catalog does not know. Closing
 * stops the daemon and deletes the directory.
 */
final class ExternalDirDaemon implements AutoCloseable {
  final Daemon daemon;
  final Path dir;

  private ExternalDirDaemon(Daemon daemon, Path dir) {
    this.daemon = daemon;
    this.dir = dir;
  }

  static ExternalDirDaemon start(String prefix) throws Exception {
    Path dir = Files.createTempDirectory(prefix).toRealPath();
    Daemon d = new Daemon("--external-dir", dir.toString());
    d.start();
    return new ExternalDirDaemon(d, dir);
  }

  @Override
  public void close() throws IOException {
    try {
      daemon.close();
    } finally {
      try (Stream<Path> s = Files.walk(dir)) {
        s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
      }
    }
  }
}
