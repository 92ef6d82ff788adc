package io.stated.flink;

import java.util.List;
import java.util.Map;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.runtime.state.CheckpointStorage;
import org.apache.flink.runtime.state.StateBackendMigrationTestBase;
import org.apache.flink.runtime.state.storage.JobManagerCheckpointStorage;
import org.apache.flink.testutils.junit.extensions.parameterized.Parameter;
import org.apache.flink.testutils.junit.extensions.parameterized.ParameterizedTestExtension;
import org.apache.flink.testutils.junit.extensions.parameterized.Parameters;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.extension.ExtendWith;
import org.junit.jupiter.api.extension.RegisterExtension;

/**
 * Flink's own {@link StateBackendMigrationTestBase} (from flink-runtime's tests jar) on the stated
 * backend: serializer upgrades, reconfiguration and incompatibility of keyed and operator state,
 * against a real daemon. The tests switched off are in {@link #SWITCHED_OFF}, each with its reason.
 */
@Tag("daemon-views")
@ExtendWith({ParameterizedTestExtension.class, SwitchedOff.class})
public class StatedStateBackendMigrationTest
    extends StateBackendMigrationTestBase<StatedStateBackend> {
  @RegisterExtension static final TestDaemon DAEMON = TestDaemon.plain();

  /**
   * Tests of the suite switched off here, with the reason (see {@link SwitchedOff}): none. With
   * timers on the heap ({@link StatedOptions#TIMER_SERVICE} heap) one would be:
   * testPriorityQueueStateCreationFailsIfNewSerializerIsNotCompatible, since the timer service then
   * writes timers into raw keyed state and a restore holds no queue serializer to check; the suite
   * runs with the default, daemon timers.
   */
  public static final Map<String, String> SWITCHED_OFF = Map.of();

  @Parameter public String kind;

  @Parameters(name = "kind={0}")
  public static List<String> kinds() {
    return List.of("file");
  }

  @Override
  protected StatedStateBackend getStateBackend() {
    Configuration c = new Configuration();
    c.set(StatedOptions.SOCKET, DAEMON.socket());
    c.set(StatedOptions.BACKEND_KIND, kind);
    return new StatedStateBackend().configure(c, getClass().getClassLoader());
  }

  @Override
  protected CheckpointStorage getCheckpointStorage() {
    return new JobManagerCheckpointStorage();
  }
}
