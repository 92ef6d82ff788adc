package io.stated.client;

/**
 * Key groups as {@code api/stated.proto} specifies them: FNV-1a 32 of the key bytes read as a
 * signed int, then Flink's {@code MathUtils.murmurHash}, then the modulo. Java's {@code int}
 * arithmetic wraps modulo 2^32, which is exactly what the specification asks.
 */
public final class KeyGroups {
  private KeyGroups() {}

  /** FNV-1a 32 of {@code key}, as a signed int. */
  public static int fnv1a32(byte[] key) {
    int h = 0x811c9dc5;
    for (byte b : key) {
      h ^= b & 0xff;
      h *= 16777619;
    }
    return h;
  }

  /** Flink's {@code MathUtils.murmurHash}: never negative. */
  public static int murmur(int code) {
    int k = code * 0xcc9e2d51;
    k = Integer.rotateLeft(k, 15);
    k *= 0x1b873593;
    int x = Integer.rotateLeft(k, 13);
    x = x * 5 + 0xe6546b64;
    x ^= 4;
    x ^= x >>> 16;
    x *= 0x85ebca6b;
    x ^= x >>> 13;
    x *= 0xc2b2ae35;
    x ^= x >>> 16;
    if (x >= 0) {
      return x;
    }
    return x == Integer.MIN_VALUE ? 0 : -x;
  }

  /** The key group of {@code key} among {@code maxParallelism} key groups. */
  public static int keyGroup(byte[] key, int maxParallelism) {
    if (maxParallelism <= 0) {
      throw new IllegalArgumentException("max parallelism " + maxParallelism + " is not positive");
    }
    return murmur(fnv1a32(key)) % maxParallelism;
  }

  /**
   * The inclusive key-group range {@code [start, end]} of subtask {@code index} of {@code
   * parallelism}, as Flink computes it (and the daemon, for an Open that gives parallelism).
   */
  public static int[] rangeOf(int maxParallelism, int parallelism, int index) {
    int start = (index * maxParallelism + parallelism - 1) / parallelism;
    int end = ((index + 1) * maxParallelism - 1) / parallelism;
    return new int[] {start, end};
  }
}
