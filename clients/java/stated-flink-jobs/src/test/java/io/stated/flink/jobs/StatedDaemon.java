package io.stated.flink.jobs;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.RestartStrategyOptions;
import org.junit.jupiter.api.Assumptions;

/**
 * A {@code stated serve} process of the test's own, on a data dir and socket of its own, that the
 * test can kill with SIGKILL and start again on the same socket and data dir.
 */
final class StatedDaemon implements AutoCloseable {
  /** System property naming the stated binary; scripts/flink-jobs.sh sets it. */
  static final String BIN_PROPERTY = "stated.bin";

  private final Path bin;
  private final Path dir;
  private final List<String> extraArgs;
  private Process process;

  private StatedDaemon(Path bin, Path dir, List<String> extraArgs) {
    this.bin = bin;
    this.dir = dir;
    this.extraArgs = extraArgs;
  }

  /** Starts the daemon; {@code extraArgs} go to {@code stated serve} (e.g. --external-dir). */
  static StatedDaemon start(Path bin, Path dir, String... extraArgs)
      throws IOException, InterruptedException {
    Files.createDirectories(dir);
    StatedDaemon d = new StatedDaemon(bin, dir, List.of(extraArgs));
    d.launch();
    return d;
  }

  Path log() {
    return dir.resolve("daemon.log");
  }

  Path socket() {
    return dir.resolve("s.sock");
  }

  /**
   * The stated binary a kill -9 test starts its own daemon from; skips the test when stated is not
   * configured (it then runs on Flink's backends only, see {@link Backends}).
   */
  static Path binOrSkip() {
    String bin = System.getProperty(BIN_PROPERTY, "");
    Assumptions.assumeTrue(
        Backends.stated() != null && !bin.isEmpty(),
        "stated not configured: run with -Pstated -Dstated.socket=<socket> -D"
            + BIN_PROPERTY
            + "=<stated binary> (scripts/flink-jobs.sh does)");
    return Path.of(bin);
  }

  /** The stated backend on this daemon's socket. */
  Backends.Backend backend() {
    return new Backends.Backend(
        "stated-killed",
        Backends.STATED_FACTORY,
        Map.of(Backends.STATED_OPTION_PREFIX + "socket", socket().toString()),
        null);
  }

  /**
   * {@code c} with restarts that outlast a killed daemon: the task fails while the daemon is away,
   * so the job needs more than the default 3 attempts 100 ms apart.
   */
  static Configuration restartsOutlastingKill(Configuration c) {
    c.set(RestartStrategyOptions.RESTART_STRATEGY, "fixed-delay");
    c.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_ATTEMPTS, 20);
    c.set(RestartStrategyOptions.RESTART_STRATEGY_FIXED_DELAY_DELAY, Duration.ofMillis(500));
    return c;
  }

  private void launch() throws IOException, InterruptedException {
    List<String> cmd =
        new ArrayList<>(
            List.of(
                bin.toString(),
                "serve",
                "--data-dir",
                dir.resolve("data").toString(),
                "--socket",
                socket().toString(),
                // No metrics listener: its fixed default port would clash
                // with any other daemon on the machine.
                "--metrics-addr",
                "",
                "--log-level",
                "warn"));
    cmd.addAll(extraArgs);
    ProcessBuilder pb =
        new ProcessBuilder(cmd)
            .redirectErrorStream(true)
            .redirectOutput(ProcessBuilder.Redirect.appendTo(dir.resolve("daemon.log").toFile()));
    process = pb.start();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (!listening()) {
      if (!process.isAlive()) {
        throw new IOException(
            bin
                + " serve exited with "
                + process.exitValue()
                + "; see "
                + dir.resolve("daemon.log"));
      }
      if (System.nanoTime() > deadline) {
        throw new IOException(bin + " serve did not create " + socket() + " within 30 s");
      }
      Thread.sleep(20);
    }
  }

  private boolean listening() {
    try {
      java.nio.channels.SocketChannel.open(java.net.UnixDomainSocketAddress.of(socket())).close();
      return true;
    } catch (IOException e) {
      return false;
    }
  }

  /** SIGKILL (Process.destroyForcibly on Unix), waiting until the process is gone. */
  void kill9() throws InterruptedException, IOException {
    process.destroyForcibly();
    if (!process.waitFor(30, TimeUnit.SECONDS)) {
      throw new IOException("stated did not die of SIGKILL within 30 s");
    }
  }

  /**
   * A new daemon on the same socket and data dir. The dead one's socket file is left over, as after
   * a real kill -9; the daemon replaces a stale socket itself.
   */
  void restart() throws IOException, InterruptedException {
    launch();
  }

  @Override
  public void close() {
    if (process != null && process.isAlive()) {
      process.destroy();
      try {
        if (!process.waitFor(30, TimeUnit.SECONDS)) {
          process.destroyForcibly();
        }
      } catch (InterruptedException e) {
        process.destroyForcibly();
        Thread.currentThread().interrupt();
      }
    }
  }
}
