package io.stated.flink;

import org.apache.flink.configuration.MemorySize;
import org.apache.flink.runtime.memory.MemoryManager;
import org.apache.flink.runtime.memory.OpaqueMemoryResource;
import org.apache.flink.runtime.state.BackendBuildingException;
import org.apache.flink.runtime.state.StateBackend;

/**
 * The size of a keyed backend's {@link StateCache} and the managed memory reserved for it.
 *
 * <p>Without {@link StatedOptions#CACHE_SIZE} the cache is sized as Flink sizes RocksDB's block
 * cache and write buffers: the backend declares that it uses managed memory ({@link
 * StatedStateBackend#useManagedMemory}), Flink gives each keyed operator of a slot the slot's share
 * of managed memory for the state-backend use case (a slot-scoped use case: every operator gets the
 * same share, to be shared), and the keyed backends of the slot share one {@link CacheBudget} of
 * that many bytes, reserved once in the slot's memory manager (Flink's shared memory resource,
 * which RocksDB's block cache uses too) so that nothing else in the slot is given them. The cache's
 * entries are on the JVM heap, not in managed (off-heap) memory: the reservation allocates nothing,
 * it only keeps the slot's budget from being handed out twice. The bytes themselves are heap, so
 * the TaskManager's heap must have room for them (docs/flink.md, "Options", says how to size it).
 *
 * <p>With the option set, the cache has that size and reserves nothing (the backend then declares
 * no managed memory use either). When the slot gives the operator no managed memory (managed memory
 * 0, or a test environment without it), the cache falls back to {@link #FALLBACK} bytes of heap.
 */
final class CacheMemory {
  /** The cache's size when neither the option nor managed memory gives one. */
  static final MemorySize FALLBACK = MemorySize.ofMebiBytes(64);

  /** The name of the slot's shared managed-memory resource the caches draw from. */
  static final String SHARED_RESOURCE = "stated-cache";

  final long bytes;

  /** The budget the cache draws from: shared by the slot's keyed backends when {@link #managed}. */
  final CacheBudget budget;

  /** Whether {@link #bytes} came from the slot's managed memory (and are reserved there). */
  final boolean managed;

  private final OpaqueMemoryResource<CacheBudget> shared;
  private boolean released;

  private CacheMemory(long bytes) {
    this.bytes = bytes;
    this.budget = new CacheBudget(bytes);
    this.shared = null;
    this.managed = false;
  }

  private CacheMemory(OpaqueMemoryResource<CacheBudget> shared) {
    this.budget = shared.getResourceHandle();
    this.bytes = budget.capacity();
    this.shared = shared;
    this.managed = true;
  }

  /** No cache at all (the asynchronous backend's states read the daemon directly). */
  static CacheMemory none() {
    return new CacheMemory(0);
  }

  static CacheMemory of(
      StatedStateBackend config, StateBackend.KeyedStateBackendParameters<?> p, boolean withCache)
      throws BackendBuildingException {
    if (!withCache) {
      return none();
    }
    if (config.cacheBytes() >= 0) {
      return new CacheMemory(config.cacheBytes());
    }
    double fraction = p.getManagedMemoryFraction();
    MemoryManager mm = p.getEnv().getMemoryManager();
    if (fraction <= 0 || mm == null || mm.getMemorySize() == 0) {
      return new CacheMemory(FALLBACK.getBytes());
    }
    long size = mm.computeMemorySize(fraction);
    if (size == 0) {
      return new CacheMemory(FALLBACK.getBytes());
    }
    try {
      // The first keyed backend of the slot reserves the share; the others
      // get the same budget (reference-counted: the last to close frees it).
      return new CacheMemory(
          mm.getSharedMemoryResourceForManagedMemory(SHARED_RESOURCE, CacheBudget::new, fraction));
    } catch (Exception e) {
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
  }

  /**
   * Gives this backend's lease on the slot's shared budget back (once; a no-op when nothing was
   * reserved): the last lease of the slot frees the reservation.
   */
  void release() {
    if (shared != null && !released) {
      released = true;
      try {
        shared.close();
      } catch (Exception e) {
        // The memory manager is shutting down (the TaskManager is going
        // away): there is no budget left to return to.
      }
    }
  }
}
