package io.stated.flink.jobs;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.flink.configuration.Configuration;

/**
 * The state backends the tests run on: Flink's own (hashmap, rocksdb, forst), and stated when its
 * backend is on the classpath and a daemon is given.
 *
 * <p>stated joins when both hold:
 *
 * <ul>
 *   <li>the class {@value #STATED_FACTORY} is on the test classpath (build with {@code -Pstated},
 *       which adds {@code io.stated:stated-flink});
 *   <li>the system property {@code stated.socket} names the daemon's socket; it becomes {@code
 *       state.backend.stated.socket}, and every system property starting with {@code
 *       state.backend.stated.} is passed to Flink as it is.
 * </ul>
 *
 * When neither holds, the stated variants are not generated and {@link #statedStatus()} says so
 * (the test classes print it). When only one holds, that is a mistake and the parameter sources
 * fail with what is missing, rather than quietly testing Flink's backends alone.
 */
final class Backends {
  static final String STATED_FACTORY = "io.stated.flink.StatedStateBackendFactory";
  static final String STATED_SOCKET_PROPERTY = "stated.socket";
  static final String STATED_OPTION_PREFIX = "state.backend.stated.";

  private Backends() {}

  /** A backend: a display name, the value of state.backend.type and extra options. */
  record Backend(String name, String type, Map<String, String> options, String expectedName) {
    Configuration apply(Configuration base) {
      Configuration c = new Configuration(base);
      c.setString("state.backend.type", type);
      for (Map.Entry<String, String> e : options.entrySet()) {
        c.setString(e.getKey(), e.getValue());
      }
      return c;
    }

    @Override
    public String toString() {
      return name;
    }
  }

  static final Backend HASHMAP = new Backend("hashmap", "hashmap", Map.of(), "HashMapStateBackend");
  static final Backend ROCKSDB =
      new Backend("rocksdb", "rocksdb", Map.of(), "EmbeddedRocksDBStateBackend");
  static final Backend FORST = new Backend("forst", "forst", Map.of(), "ForStStateBackend");

  /** stated, or null when it is not configured; throws when half configured. */
  static Backend stated() {
    boolean classPresent = statedClassPresent();
    String socket = System.getProperty(STATED_SOCKET_PROPERTY, "");
    if (!classPresent && socket.isEmpty()) {
      return null;
    }
    if (!classPresent) {
      throw new IllegalStateException(
          "-D"
              + STATED_SOCKET_PROPERTY
              + " is set but "
              + STATED_FACTORY
              + " is not on the classpath: run Maven with -Pstated");
    }
    if (socket.isEmpty()) {
      throw new IllegalStateException(
          STATED_FACTORY
              + " is on the classpath but no daemon is given: pass -D"
              + STATED_SOCKET_PROPERTY
              + "=<socket of a running stated daemon>");
    }
    Map<String, String> options = new TreeMap<>();
    options.put(STATED_OPTION_PREFIX + "socket", socket);
    for (String name : System.getProperties().stringPropertyNames()) {
      if (name.startsWith(STATED_OPTION_PREFIX)) {
        options.put(name, System.getProperty(name));
      }
    }
    return new Backend("stated", STATED_FACTORY, options, null);
  }

  /** One line for the test output: whether the stated variants were generated and why. */
  static String statedStatus() {
    Backend s = stated();
    if (s != null) {
      return "stated variants generated: " + STATED_FACTORY + " with " + s.options();
    }
    return "stated variants NOT generated: "
        + STATED_FACTORY
        + " is not on the classpath and -D"
        + STATED_SOCKET_PROPERTY
        + " is not set (run with -Pstated -D"
        + STATED_SOCKET_PROPERTY
        + "=<socket>)";
  }

  static boolean statedClassPresent() {
    try {
      Class.forName(STATED_FACTORY, false, Backends.class.getClassLoader());
      return true;
    } catch (ClassNotFoundException e) {
      return false;
    }
  }

  /** Flink's backends named, then stated when configured. */
  static List<Backend> with(Backend... flinks) {
    List<Backend> l = new ArrayList<>(List.of(flinks));
    Backend s = stated();
    if (s != null) {
      l.add(s);
    }
    return l;
  }
}
