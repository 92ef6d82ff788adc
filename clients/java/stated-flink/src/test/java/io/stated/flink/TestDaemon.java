package io.stated.flink;

import io.stated.client.Daemon;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Comparator;
import java.util.stream.Stream;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * A test class's daemon: {@code @RegisterExtension static final TestDaemon DAEMON =
 * TestDaemon.plain();} starts {@code stated serve} on a temporary data dir before the class's first
 * test and stops it after its last. {@link #withExternalDir} starts it with {@code --external-dir}
 * on a fresh temporary directory, for stated's incremental checkpoints (whose files the daemon
 * writes there); the directory is outside the daemon's data dir, whose checkpoint sweep deletes
 * what its catalog does not know, and is deleted with the daemon.
 */
final class TestDaemon implements BeforeAllCallback, AfterAllCallback {
  private final boolean externalDir;
  private Daemon daemon;
  private Path dir;

  private TestDaemon(boolean externalDir) {
    this.externalDir = externalDir;
  }

  static TestDaemon plain() {
    return new TestDaemon(false);
  }

  static TestDaemon withExternalDir() {
    return new TestDaemon(true);
  }

  @Override
  public void beforeAll(ExtensionContext context) throws Exception {
    if (externalDir) {
      dir = Files.createTempDirectory("stated-flink-ext-").toRealPath();
      daemon = new Daemon("--external-dir", dir.toString());
    } else {
      daemon = new Daemon();
    }
    daemon.start();
  }

  @Override
  public void afterAll(ExtensionContext context) throws Exception {
    try {
      if (daemon != null) {
        daemon.close();
      }
    } finally {
      daemon = null;
      if (dir != null) {
        try (Stream<Path> s = Files.walk(dir)) {
          s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
        dir = null;
      }
    }
  }

  /** The running daemon (between the class's first and last test). */
  Daemon daemon() {
    if (daemon == null) {
      throw new IllegalStateException("the test class's daemon runs only while its tests do");
    }
    return daemon;
  }

  /** The daemon's Unix socket, as {@link StatedOptions#SOCKET} takes it. */
  String socket() {
    return daemon().socket.toString();
  }

  /** The daemon's {@code --external-dir} ({@link #withExternalDir} only). */
  Path externalDir() {
    if (dir == null) {
      throw new IllegalStateException("this daemon runs without --external-dir");
    }
    return dir;
  }
}
