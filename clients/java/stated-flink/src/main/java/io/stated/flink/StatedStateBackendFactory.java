package io.stated.flink;

import org.apache.flink.configuration.IllegalConfigurationException;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.runtime.state.StateBackendFactory;

/**
 * Selects stated with {@code state.backend.type: io.stated.flink.StatedStateBackendFactory}; the
 * options are {@link StatedOptions}.
 */
public final class StatedStateBackendFactory implements StateBackendFactory<StatedStateBackend> {
  @Override
  public StatedStateBackend createFromConfig(ReadableConfig config, ClassLoader classLoader)
      throws IllegalConfigurationException {
    return new StatedStateBackend().configure(config, classLoader);
  }
}
