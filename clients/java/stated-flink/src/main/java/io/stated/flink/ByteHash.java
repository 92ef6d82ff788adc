package io.stated.flink;

/**
 * Hashes of byte arrays for the JVM-side caches' hash maps. {@link
 * java.util.Arrays#hashCode(byte[])} (31 times the hash plus the byte) gives many equal hashes to
 * the short, mostly zero keys of numbers (a serialized long differs from the next in its last
 * bytes, and 31 times one byte plus the next repeats often), so a cache of a million such keys
 * turns the map's bins into trees searched with {@code equals}: that was a third of the synchronous
 * backend's task threads' time at 1 GiB (docs/performance.md, "Flink"). Here FNV-1a runs over every
 * byte and MurmurHash3's finalizer spreads every input bit to every hash bit.
 */
final class ByteHash {
  private static final int FNV_PRIME = 0x01000193;

  private ByteHash() {}

  /** A seed from a state's name. */
  static int seed(String state) {
    return state.hashCode() * 0x9E3779B9;
  }

  /** Mixes {@code b[from, to)} into {@code h}. */
  static int add(int h, byte[] b, int from, int to) {
    for (int i = from; i < to; i++) {
      h = (h ^ (b[i] & 0xFF)) * FNV_PRIME;
    }
    return h;
  }

  /** Mixes all of {@code b}, then its length (so that where one array ends counts). */
  static int add(int h, byte[] b) {
    return (add(h, b, 0, b.length) ^ b.length) * FNV_PRIME;
  }

  /** The final hash. */
  static int finish(int h) {
    h ^= h >>> 16;
    h *= 0x85EBCA6B;
    h ^= h >>> 13;
    h *= 0xC2B2AE35;
    h ^= h >>> 16;
    return h;
  }

  private static final long FNV_PRIME_64 = 0x100000001B3L;

  /** A 64-bit seed from a state's name (for {@link WrittenFilter}, which needs more bits). */
  static long seed64(String state) {
    return (state.hashCode() ^ 0xCBF29CE484222325L) * 0x9E3779B97F4A7C15L;
  }

  /** Mixes all of {@code b}, then its length, into a 64-bit FNV-1a hash. */
  static long add64(long h, byte[] b) {
    for (byte x : b) {
      h = (h ^ (x & 0xFF)) * FNV_PRIME_64;
    }
    return (h ^ b.length) * FNV_PRIME_64;
  }

  /** The final 64-bit hash: MurmurHash3's 64-bit finalizer. */
  static long finish64(long h) {
    h ^= h >>> 33;
    h *= 0xFF51AFD7ED558CCDL;
    h ^= h >>> 33;
    h *= 0xC4CEB9FE1A85EC53L;
    h ^= h >>> 33;
    return h;
  }
}
