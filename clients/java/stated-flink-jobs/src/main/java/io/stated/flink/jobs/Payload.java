package io.stated.flink.jobs;

/**
 * The per-key value state of the job: a byte array whose first 8 bytes are the key's event count
 * and whose rest is mixed by every event. Its size sets the job's state size (keys x payload
 * bytes), and its checksum at the end proves that every update survived restores.
 */
final class Payload {
  private Payload() {}

  /** The payload of a key that has seen no event yet: incompressible, derived from the key. */
  static byte[] initial(long key, int size) {
    byte[] p = new byte[size];
    long h = EventGenerator.mix64(key * 0x2545F4914F6CDD1DL + 1);
    for (int i = 8; i < size; i++) {
      if ((i & 7) == 0) {
        h = EventGenerator.mix64(h + i);
      }
      p[i] = (byte) (h >>> ((i & 7) * 8));
    }
    return p;
  }

  /** Applies one event: count + 1, and one byte mixed with the value. */
  static void apply(byte[] p, long value) {
    long count = count(p) + 1;
    for (int i = 0; i < 8; i++) {
      p[i] = (byte) (count >>> (56 - 8 * i));
    }
    int at =
        8 + (int) Math.floorMod(EventGenerator.mix64(count ^ (value << 20)), (long) (p.length - 8));
    p[at] ^= (byte) (value * 31 + 7);
  }

  static long count(byte[] p) {
    long c = 0;
    for (int i = 0; i < 8; i++) {
      c = (c << 8) | (p[i] & 0xFF);
    }
    return c;
  }

  /** FNV-1a 64 over the whole payload. */
  static long checksum(byte[] p) {
    long h = 0xcbf29ce484222325L;
    for (byte b : p) {
      h ^= (b & 0xFF);
      h *= 0x100000001b3L;
    }
    return h;
  }
}
