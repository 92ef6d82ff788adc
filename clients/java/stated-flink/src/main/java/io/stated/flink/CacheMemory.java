package io.stated.flink;

import org.apache.flink.configuration.MemorySize;
import org.apache.flink.runtime.memory.MemoryManager;
import org.apache.flink.runtime.memory.MemoryReservationException;
import org.apache.flink.runtime.state.BackendBuildingException;
import org.apache.flink.runtime.state.StateBackend;

/**
 * The size of a keyed backend's {@link StateCache} and the managed memory reserved for it.
 *
 * <p>Without {@link StatedOptions#CACHE_SIZE} the cache is sized as Flink sizes RocksDB's block
 * cache and write buffers: the backend declares that it uses managed memory ({@link
 * StatedStateBackend#useManagedMemory}), Flink gives each keyed operator a fraction of its slot's
 * managed memory for the state-backend use case, and the cache takes that many bytes, reserved in
 * the slot's memory manager so that nothing else in the slot is given them. The cache's entries are
 * on the JVM heap, not in managed (off-heap) memory: the reservation allocates nothing, it only
 * keeps the slot's budget from being handed out twice. The bytes themselves are heap, so the
 * TaskManager's heap must have room for them (docs/flink.md, "Options", says how to size it).
 *
 * <p>With the option set, the cache has that size and reserves nothing (the backend then declares
 * no managed memory use either). When the slot gives the operator no managed memory (managed memory
 * 0, or a test environment without it), the cache falls back to {@link #FALLBACK} bytes of heap.
 */
final class CacheMemory {
  /** The cache's size when neither the option nor managed memory gives one. */
  static final MemorySize FALLBACK = MemorySize.ofMebiBytes(64);

  final long bytes;

  /** Whether {@link #bytes} came from the slot's managed memory (and are reserved there). */
  final boolean managed;

  private final MemoryManager memoryManager;
  private final Object owner;
  private boolean released;

  private CacheMemory(long bytes, MemoryManager memoryManager, Object owner) {
    this.bytes = bytes;
    this.memoryManager = memoryManager;
    this.owner = owner;
    this.managed = memoryManager != null;
  }

  /** No cache at all (the asynchronous backend's states read the daemon directly). */
  static CacheMemory none() {
    return new CacheMemory(0, null, null);
  }

  static CacheMemory of(
      StatedStateBackend config, StateBackend.KeyedStateBackendParameters<?> p, boolean withCache)
      throws BackendBuildingException {
    if (!withCache) {
      return none();
    }
    if (config.cacheBytes() >= 0) {
      return new CacheMemory(config.cacheBytes(), null, null);
    }
    double fraction = p.getManagedMemoryFraction();
    MemoryManager mm = p.getEnv().getMemoryManager();
    if (fraction <= 0 || mm == null || mm.getMemorySize() == 0) {
      return new CacheMemory(FALLBACK.getBytes(), null, null);
    }
    long size = mm.computeMemorySize(fraction);
    if (size == 0) {
      return new CacheMemory(FALLBACK.getBytes(), null, null);
    }
    Object owner = new Object();
    try {
      mm.reserveMemory(owner, size);
    } catch (MemoryReservationException e) {
      throw new BackendBuildingException(
          "the stated cache cannot reserve its "
              + new MemorySize(size).toHumanReadableString()
              + " of the slot's managed memory (fraction "
              + fraction
              + "): "
              + e.getMessage()
              + "; give the TaskManager more managed memory or set "
              + StatedOptions.CACHE_SIZE.key()
              + " to size the cache without it",
          e);
    }
    return new CacheMemory(size, mm, owner);
  }

  /** Gives the reserved managed memory back (once; a no-op when nothing was reserved). */
  void release() {
    if (memoryManager != null && !released) {
      released = true;
      if (!memoryManager.isShutdown()) {
        // A shut-down manager (the TaskManager is going away) has no budget to return to.
        memoryManager.releaseMemory(owner, bytes);
      }
    }
  }
}
