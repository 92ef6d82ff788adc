package io.stated.flink;

import io.stated.api.v1.BackendKind;
import io.stated.client.StatedClient;
import java.io.IOException;
import java.nio.file.Path;
import java.util.Locale;
import org.apache.flink.configuration.IllegalConfigurationException;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.ReadableConfig;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.runtime.state.AbstractKeyedStateBackend;
import org.apache.flink.runtime.state.AbstractStateBackend;
import org.apache.flink.runtime.state.BackendBuildingException;
import org.apache.flink.runtime.state.ConfigurableStateBackend;
import org.apache.flink.runtime.state.DefaultOperatorStateBackendBuilder;
import org.apache.flink.runtime.state.OperatorStateBackend;

/**
 * The stated state backend: keyed state in a stated daemon, operator state in Flink's default
 * operator backend. See {@link StatedOptions} for its options.
 */
public class StatedStateBackend extends AbstractStateBackend implements ConfigurableStateBackend {
  private static final long serialVersionUID = 1L;

  private String socket;
  private String address;
  private String token;
  private boolean tls;
  private String tlsCa;
  private String kind = "file";
  private int maxInFlight = 8;

  /**
   * The cache's bytes per keyed backend; -1: from the slot's managed memory ({@link CacheMemory}).
   */
  private long cacheBytes = -1;

  private boolean readAhead = StatedOptions.READ_AHEAD.defaultValue();
  private boolean batchSocket = StatedOptions.BATCH_SOCKET.defaultValue();

  private boolean incremental;
  private String timerService = StatedOptions.TIMER_SERVICE.defaultValue();
  private String externalRoot = "";
  private long asyncCacheBytes = StatedOptions.ASYNC_CACHE_SIZE.defaultValue().getBytes();

  /** Bytes of the asynchronous backend's filter of new keys ({@link WrittenFilter}). */
  private long asyncFilterBytes = StatedOptions.ASYNC_NEW_KEY_FILTER_SIZE.defaultValue().getBytes();

  public StatedStateBackend() {}

  /** A backend on the daemon at Unix socket {@code socket}. */
  public StatedStateBackend(String socket) {
    this.socket = socket;
  }

  @Override
  public StatedStateBackend configure(ReadableConfig config, ClassLoader classLoader)
      throws IllegalConfigurationException {
    StatedStateBackend b = new StatedStateBackend();
    b.socket = config.getOptional(StatedOptions.SOCKET).orElse(socket);
    b.address = config.getOptional(StatedOptions.ADDRESS).orElse(address);
    b.token = config.getOptional(StatedOptions.TOKEN).orElse(token);
    b.tls = config.getOptional(StatedOptions.TLS).orElse(tls);
    b.tlsCa = config.getOptional(StatedOptions.TLS_CA).orElse(tlsCa);
    b.kind = config.getOptional(StatedOptions.BACKEND_KIND).orElse(kind);
    b.maxInFlight = config.getOptional(StatedOptions.MAX_IN_FLIGHT).orElse(maxInFlight);
    b.cacheBytes =
        config.getOptional(StatedOptions.CACHE_SIZE).map(MemorySize::getBytes).orElse(cacheBytes);
    b.incremental = config.getOptional(StatedOptions.INCREMENTAL).orElse(incremental);
    b.readAhead = config.getOptional(StatedOptions.READ_AHEAD).orElse(readAhead);
    b.batchSocket = config.getOptional(StatedOptions.BATCH_SOCKET).orElse(batchSocket);
    b.timerService = config.getOptional(StatedOptions.TIMER_SERVICE).orElse(timerService);
    b.externalRoot = config.getOptional(StatedOptions.EXTERNAL_ROOT).orElse(externalRoot);
    b.asyncCacheBytes =
        config
            .getOptional(StatedOptions.ASYNC_CACHE_SIZE)
            .map(MemorySize::getBytes)
            .orElse(asyncCacheBytes);
    b.asyncFilterBytes =
        config
            .getOptional(StatedOptions.ASYNC_NEW_KEY_FILTER_SIZE)
            .map(MemorySize::getBytes)
            .orElse(asyncFilterBytes);
    b.latencyTrackingConfigBuilder = latencyTrackingConfigBuilder.configure(config);
    b.sizeTrackingConfigBuilder = sizeTrackingConfigBuilder.configure(config);
    b.validate();
    return b;
  }

  void validate() {
    if ((socket == null || socket.isEmpty()) == (address == null || address.isEmpty())) {
      throw new IllegalConfigurationException(
          "the stated state backend needs exactly one of "
              + StatedOptions.SOCKET.key()
              + " (the daemon's Unix socket) and "
              + StatedOptions.ADDRESS.key()
              + " (host:port of a daemon serving TCP)");
    }
    backendKind();
    daemonTimers();
    if (maxInFlight < 1) {
      throw new IllegalConfigurationException(
          StatedOptions.MAX_IN_FLIGHT.key() + " must be at least 1, not " + maxInFlight);
    }
    if (incremental && backendKind() != BackendKind.BACKEND_KIND_LSM) {
      throw new IllegalConfigurationException(
          StatedOptions.INCREMENTAL.key()
              + " needs "
              + StatedOptions.BACKEND_KIND.key()
              + " lsm (stated's incremental checkpoints are of its lsm store), not \""
              + kind
              + "\"");
    }
    if (externalRoot.startsWith("/") || externalRoot.contains("..")) {
      throw new IllegalConfigurationException(
          StatedOptions.EXTERNAL_ROOT.key()
              + " must be a relative path inside the daemon's --external-dir, not \""
              + externalRoot
              + "\"");
    }
    if (address != null && !address.isEmpty() && address.lastIndexOf(':') <= 0) {
      throw new IllegalConfigurationException(
          StatedOptions.ADDRESS.key() + " must be host:port, not \"" + address + "\"");
    }
  }

  BackendKind backendKind() {
    switch (kind.toLowerCase(Locale.ROOT)) {
      case "heap":
        return BackendKind.BACKEND_KIND_HEAP;
      case "file":
        return BackendKind.BACKEND_KIND_FILE;
      case "lsm":
        return BackendKind.BACKEND_KIND_LSM;
      default:
        throw new IllegalConfigurationException(
            StatedOptions.BACKEND_KIND.key() + " must be heap, file or lsm, not \"" + kind + "\"");
    }
  }

  /** Whether timers are daemon states ({@link StatedOptions#TIMER_SERVICE}), or heap queues. */
  boolean daemonTimers() {
    switch (timerService.toLowerCase(Locale.ROOT)) {
      case "daemon":
        return true;
      case "heap":
        return false;
      default:
        throw new IllegalConfigurationException(
            StatedOptions.TIMER_SERVICE.key()
                + " must be daemon or heap, not \""
                + timerService
                + "\"");
    }
  }

  /** Whether misses read the key's other states along ({@link StatedOptions#READ_AHEAD}). */
  boolean readAhead() {
    return readAhead;
  }

  /** Whether checkpoints are stated's incremental ones ({@link StatedOptions#INCREMENTAL}). */
  boolean incremental() {
    return incremental;
  }

  /** The daemon's root of a job's files ({@link StatedOptions#EXTERNAL_ROOT}). */
  String externalRoot(String jobId) {
    String prefix = externalRoot;
    while (prefix.endsWith("/")) {
      prefix = prefix.substring(0, prefix.length() - 1);
    }
    return prefix.isEmpty() ? jobId : prefix + "/" + jobId;
  }

  /** A client for the configured daemon. */
  StatedClient connect() throws IOException {
    validate();
    StatedClient.Builder b;
    if (socket != null && !socket.isEmpty()) {
      b = StatedClient.unixSocket(Path.of(socket)).batchSocket(batchSocket);
    } else {
      int colon = address.lastIndexOf(':');
      int port;
      try {
        port = Integer.parseInt(address.substring(colon + 1));
      } catch (NumberFormatException e) {
        throw new IllegalConfigurationException(
            StatedOptions.ADDRESS.key() + " must be host:port, not \"" + address + "\"");
      }
      b = StatedClient.tcp(address.substring(0, colon), port).token(token);
      if (tls) {
        b.tls(tlsCa == null || tlsCa.isEmpty() ? null : Path.of(tlsCa));
      }
    }
    return b.maxInFlight(maxInFlight).build();
  }

  org.apache.flink.runtime.state.metrics.LatencyTrackingStateConfig latencyTracking(
      org.apache.flink.metrics.MetricGroup group) {
    return latencyTrackingConfigBuilder.setMetricGroup(group).build();
  }

  org.apache.flink.runtime.state.metrics.SizeTrackingStateConfig sizeTracking(
      org.apache.flink.metrics.MetricGroup group) {
    return sizeTrackingConfigBuilder.setMetricGroup(group).build();
  }

  @Override
  public <K> AbstractKeyedStateBackend<K> createKeyedStateBackend(
      KeyedStateBackendParameters<K> parameters) throws IOException {
    return new StatedKeyedStateBackendBuilder<>(this, parameters, true, daemonTimers()).build();
  }

  /**
   * The cache's bytes per keyed backend ({@link StatedOptions#CACHE_SIZE}), or -1 when the cache
   * takes its size from the slot's managed memory.
   */
  long cacheBytes() {
    return cacheBytes;
  }

  /**
   * Whether Flink gives the keyed operators managed memory for this backend: yes unless {@link
   * StatedOptions#CACHE_SIZE} sizes the cache (as RocksDB takes it for its block cache); the cache
   * reserves it there and keeps its entries on the heap ({@link CacheMemory}).
   */
  @Override
  public boolean useManagedMemory() {
    return cacheBytes < 0;
  }

  @Override
  public boolean supportsAsyncKeyedStateBackend() {
    return true;
  }

  /**
   * The asynchronous (State V2) keyed backend: the synchronous backend's restore, registration,
   * snapshots and timers, with state accesses batched onto the daemon's stream ({@link
   * StatedAsyncKeyedStateBackend}).
   */
  @Override
  public <K> org.apache.flink.runtime.state.AsyncKeyedStateBackend<K> createAsyncKeyedStateBackend(
      KeyedStateBackendParameters<K> parameters) throws IOException {
    return new StatedAsyncKeyedStateBackend<>(
        // Its states read the daemon directly, not through the synchronous
        // cache: none is made (nor warmed by a restore, nor given managed
        // memory); its own value cache is asyncCacheBytes.
        new StatedKeyedStateBackendBuilder<>(this, parameters, false, false).build(),
        parameters.getEnv().getExecutionConfig(),
        asyncCacheBytes,
        asyncFilterBytes,
        parameters.getMetricGroup());
  }

  @Override
  public OperatorStateBackend createOperatorStateBackend(OperatorStateBackendParameters parameters)
      throws BackendBuildingException {
    return new DefaultOperatorStateBackendBuilder(
            parameters.getEnv().getUserCodeClassLoader().asClassLoader(),
            parameters.getEnv().getExecutionConfig(),
            true,
            parameters.getStateHandles(),
            parameters.getCancelStreamRegistry())
        .build();
  }

  @Override
  public boolean supportsNoClaimRestoreMode() {
    // Full snapshots are self-contained; incremental ones take Flink's
    // FULL_CHECKPOINT after a NO_CLAIM restore as the daemon's
    // full_checkpoint, which reuses no file of the restored checkpoint.
    return true;
  }

  /**
   * Both formats. A native savepoint is the backend's own snapshot, which is a self-contained full
   * snapshot in Flink's canonical key-grouped layout, written to the savepoint's directory, so it
   * restores like a checkpoint, at any parallelism. Operators with {@code enableAsyncState()} need
   * it: Flink 2.3.0 takes no canonical savepoint of their keyed state, whatever the backend ("Not
   * supported yet", {@code StreamOperatorStateHandler}). Should snapshots ever share files between
   * checkpoints (incremental), a savepoint must still write a full one.
   */
  @Override
  public boolean supportsSavepointFormat(SavepointFormatType formatType) {
    return true;
  }
}
