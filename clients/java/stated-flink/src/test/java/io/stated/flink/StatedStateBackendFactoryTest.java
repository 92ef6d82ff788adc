package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.file.Path;
import java.util.List;
import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.typeutils.base.IntSerializer;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.core.fs.CloseableRegistry;
import org.apache.flink.metrics.groups.UnregisteredMetricsGroup;
import org.apache.flink.runtime.operators.testutils.MockEnvironment;
import org.apache.flink.runtime.operators.testutils.MockEnvironmentBuilder;
import org.apache.flink.runtime.state.KeyGroupRange;
import org.apache.flink.runtime.state.KeyedStateBackendParametersImpl;
import org.apache.flink.runtime.state.StateBackend;
import org.apache.flink.runtime.state.StateBackendLoader;
import org.apache.flink.runtime.state.ttl.TtlTimeProvider;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Selecting the backend by configuration, and what a user sees when it is misconfigured. */
class StatedStateBackendFactoryTest {
  @TempDir Path dir;

  @Test
  void selectedByStateBackendType() throws Exception {
    Configuration c = new Configuration();
    c.set(StateBackendOptions.STATE_BACKEND, StatedStateBackendFactory.class.getName());
    c.set(StatedOptions.SOCKET, dir.resolve("stated.sock").toString());
    c.set(StatedOptions.BACKEND_KIND, "lsm");
    StateBackend b =
        StateBackendLoader.loadStateBackendFromConfig(c, getClass().getClassLoader(), null);
    assertThat(b).isInstanceOf(StatedStateBackend.class);
    assertThat(((StatedStateBackend) b).backendKind())
        .isEqualTo(io.stated.api.v1.BackendKind.BACKEND_KIND_LSM);
  }

  @Test
  void needsExactlyOneDaemon() {
    Configuration none = new Configuration();
    assertThatThrownBy(() -> new StatedStateBackendFactory().createFromConfig(none, null))
        .isInstanceOf(IllegalConfigurationException.class)
        .hasMessageContaining(StatedOptions.SOCKET.key())
        .hasMessageContaining(StatedOptions.ADDRESS.key());
    Configuration both = new Configuration();
    both.set(StatedOptions.SOCKET, "/x.sock");
    both.set(StatedOptions.ADDRESS, "localhost:1");
    assertThatThrownBy(() -> new StatedStateBackendFactory().createFromConfig(both, null))
        .isInstanceOf(IllegalConfigurationException.class);
    Configuration kind = new Configuration();
    kind.set(StatedOptions.SOCKET, "/x.sock");
    kind.set(StatedOptions.BACKEND_KIND, "rocks");
    assertThatThrownBy(() -> new StatedStateBackendFactory().createFromConfig(kind, null))
        .isInstanceOf(IllegalConfigurationException.class)
        .hasMessageContaining("rocks")
        .hasMessageContaining("heap, file or lsm");
    Configuration addr = new Configuration();
    addr.set(StatedOptions.ADDRESS, "no-port");
    assertThatThrownBy(() -> new StatedStateBackendFactory().createFromConfig(addr, null))
        .isInstanceOf(IllegalConfigurationException.class)
        .hasMessageContaining("host:port");
  }

  @Test
  void incrementalNeedsLsmAndARelativeRoot() {
    Configuration file = new Configuration();
    file.set(StatedOptions.SOCKET, "/x.sock");
    file.set(StatedOptions.INCREMENTAL, true);
    assertThatThrownBy(() -> new StatedStateBackendFactory().createFromConfig(file, null))
        .isInstanceOf(IllegalConfigurationException.class)
        .hasMessageContaining(StatedOptions.INCREMENTAL.key())
        .hasMessageContaining("lsm")
        .hasMessageContaining("\"file\"");
    Configuration root = new Configuration();
    root.set(StatedOptions.SOCKET, "/x.sock");
    root.set(StatedOptions.BACKEND_KIND, "lsm");
    root.set(StatedOptions.INCREMENTAL, true);
    root.set(StatedOptions.EXTERNAL_ROOT, "/abs");
    assertThatThrownBy(() -> new StatedStateBackendFactory().createFromConfig(root, null))
        .isInstanceOf(IllegalConfigurationException.class)
        .hasMessageContaining(StatedOptions.EXTERNAL_ROOT.key())
        .hasMessageContaining("/abs");
    root.set(StatedOptions.EXTERNAL_ROOT, "flink/");
    StatedStateBackend ok = new StatedStateBackendFactory().createFromConfig(root, null);
    org.assertj.core.api.Assertions.assertThat(ok.externalRoot("j1")).isEqualTo("flink/j1");
  }

  /** A daemon that is not running: the task fails, naming the socket and how to start one. */
  @Test
  void aDaemonThatIsNotRunning() throws Exception {
    Path sock = dir.resolve("nobody.sock");
    Configuration c = new Configuration();
    c.set(StatedOptions.SOCKET, sock.toString());
    StatedStateBackend b = new StatedStateBackendFactory().createFromConfig(c, null);
    MockEnvironment env = new MockEnvironmentBuilder().build();
    KeyGroupRange range = KeyGroupRange.of(0, 127);
    assertThatThrownBy(
            () ->
                b.createKeyedStateBackend(
                    new KeyedStateBackendParametersImpl<>(
                        env,
                        new JobID(),
                        "op",
                        IntSerializer.INSTANCE,
                        128,
                        range,
                        env.getTaskKvStateRegistry(),
                        TtlTimeProvider.DEFAULT,
                        new UnregisteredMetricsGroup(),
                        (name, value) -> {},
                        List.of(),
                        new CloseableRegistry(),
                        1.0)))
        .hasMessageContaining(sock.toString())
        .hasMessageContaining("stated serve");
    env.close();
  }
}
