package io.stated.flink;

import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

/**
 * The asynchronous backend's record of the addresses written since their state was registered in a
 * fresh instance, so that a read of an address never written is answered as an absence without a
 * daemon operation: the first read of every new key, which a job whose keys keep coming makes once
 * per key and state (in the 1 GiB benchmark, about two of every five reads). The synchronous
 * backend's cache does the same with its own filter ({@link StateCache}); the asynchronous backend
 * has no cache by default, so this is its own, with its own bound.
 *
 * <p>A state is <em>tracked</em> from its registration in a fresh instance, where the daemon holds
 * nothing of it: from then on every write that can create an entry (put, append, map put) is
 * recorded before any later request of the task is translated, on the task thread, in Flink's
 * order. A restored state is never tracked (the daemon holds entries this filter never saw). The
 * filter is a scalable Bloom filter (Almeida et al.): a chain of filters, each for twice the
 * addresses of the one before with a bit more per address, so the false-positive rate of the whole
 * stays under 2% however many addresses come, up to the byte bound. A false positive costs the read
 * it would have made anyway; a "no" is always right (an address always hashes alike, and deletes
 * leave the bits as they are, so a deleted entry may read "maybe", never a written one "no").
 *
 * <p>Each filter is a {@link BlockedBloomFilter} (one cache miss per filter per lookup).
 *
 * <p>When the next filter would not fit the bound, tracking ends for every state: the filters are
 * dropped and every read goes to the daemon, as with the filter off (bound 0).
 */
final class WrittenFilter {
  /**
   * Addresses of the first filter of the chain (384 KiB): large enough that a state of a few
   * million keys needs few filters, since a lookup of a new key reads every filter.
   */
  static final long FIRST_ADDRESSES = 1 << 18;

  /** Bits per address of the first filter; each next one has one more. */
  static final int FIRST_BITS_PER_ADDRESS = 12;

  private final long maxBytes;
  private final Set<String> tracked = new HashSet<>();
  private final List<BlockedBloomFilter> filters = new ArrayList<>();
  private long bytes;

  /** Addresses the newest filter was made for, and those recorded in it so far. */
  private long capacity;

  private long inNewest;
  private boolean exhausted;
  private long answers;

  /** A filter of at most {@code maxBytes} bytes of bits; 0 switches it off. */
  WrittenFilter(long maxBytes) {
    if (maxBytes < 0) {
      throw new IllegalArgumentException("a negative bound for the written filter: " + maxBytes);
    }
    this.maxBytes = maxBytes;
    this.exhausted = maxBytes == 0;
  }

  /** Whether the filter is still on (not switched off, nor past its bound). */
  boolean enabled() {
    return !exhausted;
  }

  /** Bytes of the filters' bits now. */
  long bytes() {
    return bytes;
  }

  /** Reads answered as absences so far. */
  long answers() {
    return answers;
  }

  /**
   * Declares that the daemon holds nothing of {@code state} (registered in a fresh instance): from
   * now on its writes are recorded and its reads of unwritten addresses answered here.
   */
  void track(String state) {
    if (!exhausted) {
      tracked.add(state);
    }
  }

  /** Whether reads of {@code state} may be answered here. */
  boolean tracks(String state) {
    return tracked.contains(state);
  }

  /**
   * Records that the daemon may hold an entry at the address: called for every write that can
   * create one, before the next request is translated. {@code tracked} is what {@link #tracks} said
   * of the state when its state object was made (a state is never tracked again once it was not, so
   * every object of a tracked state says true).
   */
  void written(boolean tracked, String state, byte[] key, byte[] ns) {
    if (!tracked || exhausted) {
      return;
    }
    if (filters.isEmpty() || inNewest >= capacity) {
      if (!grow()) {
        return;
      }
    }
    if (filters.get(filters.size() - 1).add(BlockedBloomFilter.hash(state, key, ns))) {
      inNewest++;
    }
  }

  /**
   * Whether the daemon holds no entry at the address, known here: its state is tracked ({@code
   * tracked}, as for {@link #written}) and the address was never written.
   */
  boolean knownAbsent(boolean tracked, String state, byte[] key, byte[] ns) {
    if (!tracked || exhausted) {
      return false;
    }
    long h = BlockedBloomFilter.hash(state, key, ns);
    for (int i = filters.size() - 1; i >= 0; i--) {
      if (filters.get(i).mayContain(h)) {
        return false;
      }
    }
    answers++;
    return true;
  }

  /** Starts the next filter of the chain; false (and tracking ends) when it would not fit. */
  private boolean grow() {
    long n = filters.isEmpty() ? FIRST_ADDRESSES : capacity * 2;
    int bitsPer = FIRST_BITS_PER_ADDRESS + filters.size();
    long b = BlockedBloomFilter.bytes(n, bitsPer);
    if (bytes + b > maxBytes) {
      // Past the bound: no state is tracked any more, so nothing asks.
      exhausted = true;
      tracked.clear();
      filters.clear();
      bytes = 0;
      return false;
    }
    filters.add(new BlockedBloomFilter(n, bitsPer));
    bytes += b;
    capacity = n;
    inNewest = 0;
    return true;
  }
}
