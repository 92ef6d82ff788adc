package io.stated.client;

import java.io.File;
import java.io.IOException;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

/**
 * {@code stated serve} on a temporary data dir, for tests against a real daemon. The binary is the
 * system property {@code stated.bin}, or built from the repository ({@code stated.repo}) with
 * {@code go build} once per JVM.
 */
public final class Daemon implements AutoCloseable {
  private static Path built;
  private static Path builtXcheck;

  public final Path dir;
  public final Path socket;
  private final List<String> extra;
  private Process proc;

  public Daemon(String... extraArgs) throws IOException {
    this.dir = Files.createTempDirectory("stated-java-");
    this.socket = dir.resolve("s.sock");
    this.extra = List.of(extraArgs);
  }

  static Path repo() {
    return Path.of(System.getProperty("stated.repo", "../../..")).toAbsolutePath().normalize();
  }

  /** The stated binary to run. */
  public static synchronized Path binary() throws IOException {
    String prop = System.getProperty("stated.bin", "");
    if (!prop.isEmpty()) {
      return Path.of(prop);
    }
    if (built == null) {
      built = goBuild("./cmd/stated", "stated");
    }
    return built;
  }

  /** The Go client's cross-check helper (clients/node/xcheck). */
  public static synchronized Path xcheck() throws IOException {
    String prop = System.getProperty("stated.xcheck", "");
    if (!prop.isEmpty()) {
      return Path.of(prop);
    }
    if (builtXcheck == null) {
      builtXcheck = goBuild("./clients/node/xcheck", "xcheck");
    }
    return builtXcheck;
  }

  private static Path goBuild(String pkg, String name) throws IOException {
    Path out = Path.of("target", "go-bin", name).toAbsolutePath();
    run(repo().toFile(), "go", "build", "-o", out.toString(), pkg);
    return out;
  }

  static String run(File cwd, String... cmd) throws IOException {
    ProcessBuilder pb = new ProcessBuilder(cmd).directory(cwd).redirectErrorStream(true);
    Process p = pb.start();
    byte[] outBytes = p.getInputStream().readAllBytes();
    try {
      if (!p.waitFor(5, TimeUnit.MINUTES)) {
        p.destroyForcibly();
        throw new IOException(String.join(" ", cmd) + " did not finish within 5 minutes");
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IOException("interrupted", e);
    }
    String out = new String(outBytes, StandardCharsets.UTF_8);
    if (p.exitValue() != 0) {
      throw new IOException(String.join(" ", cmd) + " failed (" + p.exitValue() + "): " + out);
    }
    return out;
  }

  /** A free TCP port on the loopback address. */
  public static int freePort() throws IOException {
    try (ServerSocket s = new ServerSocket(0)) {
      return s.getLocalPort();
    }
  }

  /** Starts the daemon and waits until it answers on its socket. */
  public void start() throws Exception {
    Files.deleteIfExists(socket);
    List<String> cmd = new ArrayList<>();
    cmd.add(binary().toString());
    cmd.addAll(
        List.of(
            "serve",
            "--data-dir",
            dir.resolve("data").toString(),
            "--socket",
            socket.toString(),
            "--metrics-addr",
            "",
            "--log-level",
            "warn"));
    cmd.addAll(extra);
    proc =
        new ProcessBuilder(cmd)
            .redirectErrorStream(true)
            .redirectOutput(ProcessBuilder.Redirect.appendTo(dir.resolve("daemon.log").toFile()))
            .start();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
    while (true) {
      if (!proc.isAlive()) {
        throw new IllegalStateException("stated serve exited: " + tail());
      }
      if (Files.exists(socket)) {
        try (StatedClient c = StatedClient.unixSocket(socket).build()) {
          c.listCheckpoints("probe").get(5, TimeUnit.SECONDS);
          return;
        } catch (Exception notYet) {
          // not serving yet
        }
      }
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException("stated serve not ready within 20s: " + tail());
      }
      Thread.sleep(50);
    }
  }

  public StatedClient client() throws IOException {
    return StatedClient.unixSocket(socket).build();
  }

  /**
   * A client that uses the daemon's batch socket or not ({@link StatedClient.Builder#batchSocket}).
   */
  public StatedClient client(boolean batchSocket) throws IOException {
    return StatedClient.unixSocket(socket).batchSocket(batchSocket).build();
  }

  public String tail() {
    try {
      String s = Files.readString(dir.resolve("daemon.log"));
      return s.length() > 2000 ? s.substring(s.length() - 2000) : s;
    } catch (IOException e) {
      return "";
    }
  }

  /**
   * Stops the daemon's process without ending it (SIGSTOP): it answers nothing until {@link
   * #resume}, so a test can tell what a client does before an answer from what it does after.
   */
  public void pause() throws IOException, InterruptedException {
    signal("-STOP");
    // kill(2) returns once the signal is queued; a thread running on another
    // CPU (of a VM whose vCPU waits for the host) stops a little later. Wait
    // until every thread of the daemon is stopped, so that nothing sent after
    // this returns can be answered before resume.
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
    while (!allThreadsStopped()) {
      if (System.nanoTime() > deadline) {
        throw new IOException("stated serve (pid " + proc.pid() + ") did not stop within 10 s");
      }
      Thread.sleep(1);
    }
  }

  /** Whether every thread of the daemon is in state T (stopped), per /proc. */
  private boolean allThreadsStopped() throws IOException {
    try (Stream<Path> tasks = Files.list(Path.of("/proc", Long.toString(proc.pid()), "task"))) {
      for (Path t : (Iterable<Path>) tasks::iterator) {
        String stat;
        try {
          stat = Files.readString(t.resolve("stat"));
        } catch (java.nio.file.NoSuchFileException gone) {
          continue;
        }
        // pid (comm) state ...: the state follows the last ')'.
        char state = stat.charAt(stat.lastIndexOf(')') + 2);
        if (state != 'T' && state != 't') {
          return false;
        }
      }
    }
    return true;
  }

  /** Lets a {@link #pause paused} daemon run on (SIGCONT). */
  public void resume() throws IOException, InterruptedException {
    signal("-CONT");
  }

  private void signal(String sig) throws IOException, InterruptedException {
    Process k = new ProcessBuilder("kill", sig, Long.toString(proc.pid())).inheritIO().start();
    if (k.waitFor() != 0) {
      throw new IOException("kill " + sig + " " + proc.pid() + " exited " + k.exitValue());
    }
  }

  /** kill -9. */
  public void kill() throws InterruptedException {
    proc.destroyForcibly();
    proc.waitFor();
  }

  @Override
  public void close() throws IOException {
    if (proc != null && proc.isAlive()) {
      proc.destroy();
      try {
        if (!proc.waitFor(20, TimeUnit.SECONDS)) {
          proc.destroyForcibly();
          proc.waitFor();
        }
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        proc.destroyForcibly();
      }
    }
    try (Stream<Path> s = Files.walk(dir)) {
      s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    }
  }
}
