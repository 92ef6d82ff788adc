package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.ByteBuffer;
import org.junit.jupiter.api.Test;

/** The caches' Bloom filter ({@link BlockedBloomFilter}). */
class BlockedBloomFilterTest {
  private static final byte[] NS = new byte[0];

  private static byte[] key(long k) {
    return ByteBuffer.allocate(8).putLong(k).array();
  }

  /**
   * One blocked filter at its capacity: no false negative, and a false-positive rate near a plain
   * Bloom filter's at the same bits (a blocked one pays a little for its one cache line).
   */
  @Test
  void atCapacity() {
    int n = 1 << 18;
    BlockedBloomFilter b = new BlockedBloomFilter(n, 12);
    int added = 0;
    for (long k = 0; k < n; k++) {
      if (b.add(BlockedBloomFilter.hash("s", key(k), NS))) {
        added++;
      }
    }
    assertThat(added).as("new addresses").isGreaterThan(n - n / 100);
    for (long k = 0; k < n; k++) {
      assertThat(b.mayContain(BlockedBloomFilter.hash("s", key(k), NS)))
          .as("address %d", k)
          .isTrue();
    }
    int fp = 0;
    for (long k = n; k < 2L * n; k++) {
      if (b.mayContain(BlockedBloomFilter.hash("s", key(k), NS))) {
        fp++;
      }
    }
    // A plain filter of 12 bits per address with 8 bits set: 0.3%.
    assertThat((double) fp / n).as("false-positive rate").isLessThan(0.01);
    assertThat(BlockedBloomFilter.bytes(n, 12)).isEqualTo(n * 12L / 8);
  }

  @Test
  void addressesDifferInEachPart() {
    long h = BlockedBloomFilter.hash("s", key(1), NS);
    assertThat(BlockedBloomFilter.hash("s", key(1), NS)).isEqualTo(h);
    assertThat(BlockedBloomFilter.hash("t", key(1), NS)).isNotEqualTo(h);
    assertThat(BlockedBloomFilter.hash("s", key(2), NS)).isNotEqualTo(h);
    assertThat(BlockedBloomFilter.hash("s", key(1), new byte[] {0})).isNotEqualTo(h);
    // Where the key ends and the namespace starts counts.
    assertThat(BlockedBloomFilter.hash("s", new byte[] {1, 2}, new byte[] {3}))
        .isNotEqualTo(BlockedBloomFilter.hash("s", new byte[] {1}, new byte[] {2, 3}));
  }
}
