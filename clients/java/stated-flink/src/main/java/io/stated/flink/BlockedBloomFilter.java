package io.stated.flink;

/**
 * A blocked Bloom filter of state addresses (Putze, Sanders, Singler: "Cache-, Hash- and
 * Space-Efficient Bloom Filters"): all of an address's bits lie in one 64-byte block, so a lookup
 * or an insert costs one cache miss, not one per bit. The filters of written addresses of both
 * caches use it ({@link WrittenFilter}, {@link StateCache}). They first used Guava's {@code
 * BloomFilter}, whose bits are spread over the whole array and read through an atomic array: in the
 * 1 GiB asynchronous benchmark its lookups and inserts were a sixth of the task threads' time. No
 * library at hand offers a blocked filter that takes inserts (fastfilter's {@code BlockedBloom} is
 * built from a key set), hence this one. Not thread-safe: each filter is its task thread's.
 */
final class BlockedBloomFilter {
  /** Bits set per address, all in one block. */
  static final int BITS_SET = 8;

  /** A block: one 64-byte cache line, 8 longs. */
  private static final int BLOCK_LONGS = 8;

  private final long[] bits;
  private final long blocks;

  /** A filter of at least {@code addresses} times {@code bitsPerAddress} bits. */
  BlockedBloomFilter(long addresses, int bitsPerAddress) {
    this.blocks = blocks(addresses, bitsPerAddress);
    if (blocks > 1 << 24) {
      throw new IllegalArgumentException("a Bloom filter of " + blocks + " blocks");
    }
    this.bits = new long[(int) blocks * BLOCK_LONGS];
  }

  private static long blocks(long addresses, int bitsPerAddress) {
    return Math.max(1, (addresses * bitsPerAddress + 511) / 512);
  }

  /** Bytes of the filter of {@code addresses} times {@code bitsPerAddress} bits. */
  static long bytes(long addresses, int bitsPerAddress) {
    return blocks(addresses, bitsPerAddress) * BLOCK_LONGS * 8;
  }

  /** The first long of the address's block: the hash's high half scaled to the blocks. */
  private int base(long h) {
    return (int) (((h >>> 32) * blocks) >>> 32) * BLOCK_LONGS;
  }

  /**
   * Sets the address's bits; whether one was unset (the address was new to this filter). The block
   * comes from the hash's high half, the bits from its low half and a remix of it (double hashing
   * within the block's 512 bits).
   */
  boolean add(long h) {
    int base = base(h);
    int a = (int) h;
    int b = (int) ByteHash.finish64(h) | 1;
    boolean added = false;
    for (int i = 0; i < BITS_SET; i++) {
      int bit = (a + i * b) & 511;
      long m = 1L << bit;
      int w = base + (bit >>> 6);
      if ((bits[w] & m) == 0) {
        bits[w] |= m;
        added = true;
      }
    }
    return added;
  }

  boolean mayContain(long h) {
    int base = base(h);
    int a = (int) h;
    int b = (int) ByteHash.finish64(h) | 1;
    for (int i = 0; i < BITS_SET; i++) {
      int bit = (a + i * b) & 511;
      if ((bits[base + (bit >>> 6)] & (1L << bit)) == 0) {
        return false;
      }
    }
    return true;
  }

  /** The hash of an address: its state's name, key and namespace, each with its length. */
  static long hash(String state, byte[] key, byte[] ns) {
    return ByteHash.finish64(ByteHash.add64(ByteHash.add64(ByteHash.seed64(state), key), ns));
  }
}
