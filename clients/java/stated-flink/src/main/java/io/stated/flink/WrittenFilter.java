package io.stated.flink;

import com.google.common.hash.BloomFilter;
import com.google.common.hash.Funnel;
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
 * filter is a scalable Bloom filter (Almeida et al.): a chain of Guava filters, each twice the
 * addresses of the one before at half its false-positive rate, so the rate of the whole stays under
 * twice the first's however many addresses come, up to the byte bound. A false positive costs the
 * read it would have made anyway; a "no" is always right (deletes leave the bits as they are, so a
 * deleted entry may read "maybe", never a written one "no").
 *
 * <p>When the next filter would not fit the bound, tracking ends for every state: the filters are
 * dropped and every read goes to the daemon, as with the filter off (bound 0).
 */
final class WrittenFilter {
  /** Addresses of the first filter of the chain. */
  static final long FIRST_ADDRESSES = 1 << 16;

  /** False-positive rate of the first filter; each next one has half its predecessor's. */
  static final double FIRST_FPP = 0.01;

  private final long maxBytes;
  private final Set<String> tracked = new HashSet<>();
  private final List<BloomFilter<Probe>> filters = new ArrayList<>();
  private final Probe probe = new Probe();
  private long bytes;

  /** Addresses the newest filter was made for, and those recorded in it so far. */
  private long capacity;

  private long inNewest;
  private double nextFpp = FIRST_FPP;
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

  /** The address of a probe: state name, key and namespace, each with its length. */
  private static final class Probe {
    String state;
    byte[] key;
    byte[] ns;
  }

  private static final Funnel<Probe> FUNNEL =
      (p, into) -> {
        into.putUnencodedChars(p.state);
        into.putInt(p.key.length);
        into.putBytes(p.key);
        into.putInt(p.ns.length);
        into.putBytes(p.ns);
      };

  /** Bits Guava gives a filter of {@code n} addresses at rate {@code p}, in bytes. */
  static long filterBytes(long n, double p) {
    return (long) Math.ceil(-n * Math.log(p) / (Math.log(2) * Math.log(2)) / 8);
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
   * create one, before the next request is translated.
   */
  void written(String state, byte[] key, byte[] ns) {
    if (!tracked.contains(state)) {
      return;
    }
    if (filters.isEmpty() || inNewest >= capacity) {
      if (!grow()) {
        return;
      }
    }
    probe.state = state;
    probe.key = key;
    probe.ns = ns;
    if (filters.get(filters.size() - 1).put(probe)) {
      inNewest++;
    }
    probe.key = null;
    probe.ns = null;
  }

  /**
   * Whether the daemon holds no entry at the address, known here: its state is tracked and the
   * address was never written.
   */
  boolean knownAbsent(String state, byte[] key, byte[] ns) {
    if (!tracked.contains(state)) {
      return false;
    }
    probe.state = state;
    probe.key = key;
    probe.ns = ns;
    boolean maybe = false;
    for (int i = filters.size() - 1; i >= 0 && !maybe; i--) {
      maybe = filters.get(i).mightContain(probe);
    }
    probe.key = null;
    probe.ns = null;
    if (!maybe) {
      answers++;
    }
    return !maybe;
  }

  /** Starts the next filter of the chain; false (and tracking ends) when it would not fit. */
  private boolean grow() {
    long n = filters.isEmpty() ? FIRST_ADDRESSES : capacity * 2;
    long b = filterBytes(n, nextFpp);
    if (bytes + b > maxBytes) {
      // Past the bound: no state is tracked any more, so nothing asks.
      exhausted = true;
      tracked.clear();
      filters.clear();
      bytes = 0;
      return false;
    }
    filters.add(BloomFilter.create(FUNNEL, n, nextFpp));
    bytes += b;
    capacity = n;
    inNewest = 0;
    nextFpp /= 2;
    return true;
  }
}
