package io.stated.flink;

import java.util.concurrent.atomic.AtomicInteger;

/**
 * Bytes that the {@link StateCache}s of one slot share. Flink gives every keyed operator of a slot
 * the slot's whole share of managed memory for the state backend (a slot-scoped use case),
 * expecting the operators' backends to share it, as RocksDB's instances in a slot share one block
 * cache; a budget per operator would hand the share out once per operator, and the second
 * operator's reservation would fail.
 *
 * <p>The caches split it evenly: each holds at most {@link #share()}, the budget over the caches
 * open on it. A cache that opens later makes the others' shares smaller, and each honours its new
 * share at its next write (a cache is used from its own task thread only, so no cache evicts
 * another's entries); one that closes leaves its share to the others. So the caches of a slot hold
 * at most the budget once each has written since the last one opened, and until then at most the
 * budget plus the newcomer's share. A cache sized by an option has a budget of its own.
 */
final class CacheBudget implements AutoCloseable {
  private final long capacity;
  private final AtomicInteger caches = new AtomicInteger();

  CacheBudget(long capacity) {
    if (capacity < 0) {
      throw new IllegalArgumentException("cache capacity " + capacity + " must not be negative");
    }
    this.capacity = capacity;
  }

  long capacity() {
    return capacity;
  }

  /** What one cache may hold now: the budget over the caches open on it. */
  long share() {
    return capacity / Math.max(1, caches.get());
  }

  void join() {
    caches.incrementAndGet();
  }

  void leave() {
    caches.decrementAndGet();
  }

  /** Nothing to free: the entries are on the heap, and each cache left the budget. */
  @Override
  public void close() {}
}
