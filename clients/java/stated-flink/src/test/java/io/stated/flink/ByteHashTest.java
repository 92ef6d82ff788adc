package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.ByteBuffer;
import java.util.HashSet;
import java.util.Set;
import java.util.function.Function;
import org.junit.jupiter.api.Test;

/**
 * The caches' addresses of a million serialized longs (the keys of a keyed job on numbers) must
 * have about a million hashes: {@code Arrays.hashCode} gave them about a quarter of that, and the
 * caches' hash maps searched trees of equal hashes with {@code equals}.
 */
class ByteHashTest {
  private static final int N = 1_000_000;

  /** Distinct hashes of the addresses of keys 0..N-1 (8 bytes, big-endian). */
  private static int distinct(Function<byte[], Integer> hash) {
    Set<Integer> seen = new HashSet<>();
    for (long k = 0; k < N; k++) {
      seen.add(hash.apply(ByteBuffer.allocate(8).putLong(k).array()));
    }
    return seen.size();
  }

  @Test
  void serializedLongsGetDistinctHashes() {
    // A random 32-bit hash of a million values repeats about 116 of them.
    int min = N - 1000;
    assertThat(distinct(k -> new StateCache.Address("payload", k, new byte[0]).hashCode()))
        .as("sync cache addresses")
        .isGreaterThan(min);
    assertThat(distinct(k -> new StateCache.Bytes(k).hashCode()))
        .as("map user keys")
        .isGreaterThan(min);
    assertThat(distinct(k -> new AsyncValueCache.Address("payload", 7, k, new byte[0]).hashCode()))
        .as("async cache addresses")
        .isGreaterThan(min);
  }

  @Test
  void whereTheKeyEndsCounts() {
    byte[] ab = {1, 2};
    byte[] a = {1};
    byte[] b = {2};
    assertThat(new StateCache.Address("s", ab, new byte[0]).hashCode())
        .isNotEqualTo(new StateCache.Address("s", a, b).hashCode());
  }
}
