package io.stated.flink.jobs;

import java.io.IOException;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.runtime.state.StateBackend;
import org.apache.flink.runtime.state.StateBackendFactory;

/**
 * stated's backend factory with its options taken from system properties: every property {@code
 * stated.flinkit.<name>} becomes the Flink option {@code state.backend.stated.<name>} on top of the
 * job's configuration. Flink's own ITCases build their cluster's configuration themselves
 * (AutoRescalingITCase sets only {@code state.backend.type}, to a name it is given), so this is how
 * a daemon's socket and the incremental mode reach them: the test names this class as the backend
 * and sets the properties (see {@link #with}).
 *
 * <p>The factory counts the backends it made, so that a test can show its job ran on stated and not
 * on a backend Flink picked by default.
 */
public final class PropertyStatedBackendFactory implements StateBackendFactory<StateBackend> {
  static final String PROPERTY_PREFIX = "stated.flinkit.";

  private static final AtomicInteger CREATED = new AtomicInteger();

  @Override
  public StateBackend createFromConfig(ReadableConfig config, ClassLoader classLoader)
      throws IllegalConfigurationException, IOException {
    Map<String, String> options = options();
    if (!options.containsKey(Backends.STATED_OPTION_PREFIX + "socket")) {
      throw new IllegalConfigurationException(
          PropertyStatedBackendFactory.class.getName()
              + " needs the system property "
              + PROPERTY_PREFIX
              + "socket (the daemon's socket); the test sets it with"
              + " PropertyStatedBackendFactory.with");
    }
    Configuration c = Configuration.fromMap(config.toMap());
    options.forEach(c::setString);
    StateBackendFactory<?> stated;
    try {
      stated =
          (StateBackendFactory<?>)
              Class.forName(Backends.STATED_FACTORY, true, classLoader)
                  .getDeclaredConstructor()
                  .newInstance();
    } catch (ReflectiveOperationException e) {
      throw new IllegalConfigurationException(
          Backends.STATED_FACTORY + " cannot be loaded: run Maven with -Pstated", e);
    }
    StateBackend b = stated.createFromConfig(c, classLoader);
    CREATED.incrementAndGet();
    return b;
  }

  /** The stated options the properties give now. */
  static Map<String, String> options() {
    Map<String, String> m = new TreeMap<>();
    for (String name : System.getProperties().stringPropertyNames()) {
      if (name.startsWith(PROPERTY_PREFIX)) {
        m.put(
            Backends.STATED_OPTION_PREFIX + name.substring(PROPERTY_PREFIX.length()),
            System.getProperty(name));
      }
    }
    return m;
  }

  /** How many backends the factory made since the JVM started. */
  static int created() {
    return CREATED.get();
  }

  /** A body that may throw. */
  interface Body {
    void run() throws Exception;
  }

  /**
   * Runs {@code body} with the stated options {@code options} (names without the {@code
   * state.backend.stated.} prefix) set as properties, removing them afterwards, and fails unless
   * the factory made at least one backend meanwhile.
   */
  static void with(Map<String, String> options, Body body) throws Exception {
    int before = created();
    options.forEach((k, v) -> System.setProperty(PROPERTY_PREFIX + k, v));
    try {
      body.run();
    } finally {
      options.keySet().forEach(k -> System.clearProperty(PROPERTY_PREFIX + k));
    }
    if (created() == before) {
      throw new AssertionError(
          "the job never created a backend through "
              + PropertyStatedBackendFactory.class.getName()
              + ": it did not run on stated");
    }
  }
}
