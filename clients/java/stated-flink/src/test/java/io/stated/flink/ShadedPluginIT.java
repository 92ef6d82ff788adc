package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.stated.client.Daemon;
import java.io.File;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Function;
import java.util.jar.JarFile;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * The plugin jar (target/stated-flink-*-plugin.jar, written by {@code package}) as a user deploys
 * it: loaded next to Flink in a class loader that holds none of the client's dependencies
 * unrelocated (no io.grpc, io.netty, io.perfmark or com.google classes, nor the unshaded client and
 * backend), it creates the backend by its factory name and runs it against a daemon on a Unix
 * socket (Netty's epoll, whose native library the jar carries under its relocated name). A
 * relocation that misses a class, a service file or the native library fails here: the class is not
 * found, or epoll does not load and the socket cannot be reached.
 */
class ShadedPluginIT {
  /** Maven repository paths (and module outputs) the isolated class loader leaves out. */
  private static final List<String> LEFT_OUT =
      List.of(
          "/io/grpc/",
          "/io/netty/",
          "/com/google/",
          "/io/perfmark/",
          "/io/stated/",
          "stated-client");

  private static Path pluginJar() {
    String p = System.getProperty("stated.plugin.jar", "");
    // The pom sets it in the integration-test phase only, after package
    // wrote the jar; in the test phase (a -Dtest naming this class runs it
    // there too) the jar is missing or stale.
    Assumptions.assumeFalse(
        p.isEmpty(), "runs in the integration-test phase, after package (mvn verify)");
    Path jar = Path.of(p);
    assertThat(jar).as("the plugin jar; run `mvn package` first").exists();
    return jar;
  }

  /** The test's class path without the client's dependencies and this module's unshaded classes. */
  private static List<URL> flinkClassPath(Path moduleClasses) throws Exception {
    List<URL> urls = new ArrayList<>();
    for (String e : System.getProperty("java.class.path").split(File.pathSeparator)) {
      if (e.isEmpty()) {
        continue;
      }
      Path p = Path.of(e).toAbsolutePath();
      String s = p.toString().replace(File.separatorChar, '/');
      boolean out = LEFT_OUT.stream().anyMatch(s::contains);
      String name = p.getFileName().toString();
      if (p.equals(moduleClasses) || (name.startsWith("stated-flink") && name.endsWith(".jar"))) {
        out = true;
      }
      if (!out) {
        urls.add(p.toUri().toURL());
      }
    }
    return urls;
  }

  @Test
  void pluginJarRunsNextToFlinkAlone() throws Exception {
    Path jar = pluginJar();
    try (JarFile j = new JarFile(jar.toFile())) {
      assertThat(j.getEntry("io/stated/flink/StatedStateBackendFactory.class")).isNotNull();
      assertThat(j.getEntry("io/stated/shaded/io/grpc/ManagedChannel.class")).isNotNull();
      assertThat(j.getEntry("io/grpc/ManagedChannel.class")).isNull();
      assertThat(j.getEntry("com/google/protobuf/Message.class")).isNull();
      assertThat(j.getEntry("com/google/rpc/Status.class")).isNull();
      assertThat(j.getEntry("io/stated/shaded/com/google/rpc/Status.class")).isNotNull();
      assertThat(
              j.getEntry(
                  "META-INF/native/libio_stated_shaded_netty_transport_native_epoll_x86_64.so"))
          .as("Netty's epoll library under the relocated name")
          .isNotNull();
    }
    Path moduleClasses =
        Path.of(
                StatedStateBackendFactory.class
                    .getProtectionDomain()
                    .getCodeSource()
                    .getLocation()
                    .toURI())
            .toAbsolutePath();
    List<URL> urls = new ArrayList<>();
    urls.add(jar.toUri().toURL());
    urls.addAll(flinkClassPath(moduleClasses));
    try (Daemon daemon = new Daemon();
        URLClassLoader loader =
            new URLClassLoader(
                "flink-with-plugin",
                urls.toArray(URL[]::new),
                ClassLoader.getPlatformClassLoader())) {
      daemon.start();
      // The loader is isolated: nothing of the client's dependencies but
      // the relocated copies.
      assertThatThrownBy(() -> Class.forName("io.grpc.ManagedChannel", false, loader))
          .isInstanceOf(ClassNotFoundException.class);
      assertThatThrownBy(() -> Class.forName("com.google.protobuf.ByteString", false, loader))
          .isInstanceOf(ClassNotFoundException.class);
      Class<?> factory = Class.forName(StatedStateBackendFactory.class.getName(), false, loader);
      assertThat(Path.of(factory.getProtectionDomain().getCodeSource().getLocation().toURI()))
          .isEqualTo(jar.toAbsolutePath());

      @SuppressWarnings("unchecked")
      Function<String, String> smoke =
          (Function<String, String>)
              Class.forName(ShadedPluginSmoke.class.getName(), true, loader)
                  .getDeclaredConstructor()
                  .newInstance();
      ClassLoader before = Thread.currentThread().getContextClassLoader();
      Thread.currentThread().setContextClassLoader(loader);
      String result;
      try {
        result = smoke.apply(daemon.socket.toString());
      } finally {
        Thread.currentThread().setContextClassLoader(before);
      }
      assertThat(result).startsWith("restored " + ShadedPluginSmoke.KEYS + " keys");
    }
    assertThat(Files.size(jar)).isPositive();
  }
}
