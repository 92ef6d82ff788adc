package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.google.protobuf.ByteString;
import org.junit.jupiter.api.Test;

/** The asynchronous backend's value cache without a daemon: bound, order of answers, drops. */
class AsyncValueCacheTest {
  private static AsyncValueCache.Address at(String state, int key) {
    return new AsyncValueCache.Address(
        state, key % 128, ByteString.copyFromUtf8("k" + key), ByteString.EMPTY);
  }

  private static ByteString value(int bytes, int fill) {
    byte[] b = new byte[bytes];
    java.util.Arrays.fill(b, (byte) fill);
    return ByteString.copyFrom(b);
  }

  @Test
  void staysWithinItsBytesAndEvictsTheLeastRecentlyUsed() {
    long capacity = 64 << 10;
    AsyncValueCache c = new AsyncValueCache(capacity);
    java.util.List<AsyncValueCache.WriteBack> sent = new java.util.ArrayList<>();
    for (int i = 0; i < 5_000; i++) {
      assertThat(c.write(at("v", i), value(1024, i))).as("write %d stored", i).isTrue();
      c.evict(sent);
      assertThat(c.bytes()).as("bytes after write %d", i).isLessThanOrEqualTo(capacity);
    }
    // 1 KiB values: what it holds is within the bound, and it holds some.
    assertThat(c.entries()).isBetween(10, 64);
    // Every write is either still cached (dirty) or was handed back, once,
    // oldest first, with its value.
    assertThat(sent.size() + c.dirtyEntries()).isEqualTo(5_000);
    for (int i = 0; i < sent.size(); i++) {
      assertThat(sent.get(i).address()).isEqualTo(at("v", i));
      assertThat(sent.get(i).value()).isEqualTo(value(1024, i));
    }
    assertThat(c.lookup(at("v", 4_999)).value).isEqualTo(value(1024, 4_999));
    assertThat(c.lookup(at("v", 0)).hit).isFalse();
    // A hit is a use: the oldest entry, once read, outlives the next one.
    int oldest = 5_000 - c.entries();
    assertThat(c.lookup(at("v", oldest)).hit).isTrue();
    c.write(at("v", 5_000), value(1024, 1));
    c.evict(sent);
    assertThat(c.lookup(at("v", oldest)).hit).as("read before the eviction").isTrue();
    assertThat(c.lookup(at("v", oldest + 1)).hit).as("not read").isFalse();
    // A value larger than the whole cache is not kept (the caller sends it),
    // and drops the old one, dirty or not.
    int dirty = c.dirtyEntries();
    assertThat(c.write(at("v", 4_999), value((int) capacity, 2))).isFalse();
    assertThat(c.lookup(at("v", 4_999)).hit).isFalse();
    assertThat(c.dirtyEntries()).isEqualTo(dirty - 1);
    assertThat(c.bytes()).isLessThanOrEqualTo(capacity);
  }

  @Test
  void anAbsenceIsCachedAsNotAValue() {
    AsyncValueCache c = new AsyncValueCache(1 << 20);
    c.write(at("v", 1), null);
    c.write(at("v", 2), ByteString.EMPTY);
    AsyncValueCache.Lookup absent = c.lookup(at("v", 1));
    assertThat(absent.hit).isTrue();
    assertThat(absent.value).isNull();
    AsyncValueCache.Lookup empty = c.lookup(at("v", 2));
    assertThat(empty.hit).isTrue();
    assertThat(empty.value).isEqualTo(ByteString.EMPTY);
    assertThat(c.hits()).isEqualTo(2);
  }

  @Test
  void anAnswerOlderThanAWriteDoesNotOverwriteIt() {
    AsyncValueCache c = new AsyncValueCache(1 << 20);
    AsyncValueCache.Address a = at("v", 7);
    // A miss sent; the task writes before the answer arrives.
    AsyncValueCache.Lookup miss = c.lookup(a);
    assertThat(miss.hit).isFalse();
    c.write(a, value(4, 2));
    c.fill(a, miss.ticket, value(4, 1));
    assertThat(c.lookup(a).value).isEqualTo(value(4, 2));
    // Evicted or not, the same holds when the write was a delete.
    AsyncValueCache.Address b = at("v", 8);
    AsyncValueCache.Lookup missB = c.lookup(b);
    c.write(b, null);
    c.fill(b, missB.ticket, value(4, 1));
    AsyncValueCache.Lookup afterB = c.lookup(b);
    assertThat(afterB.hit).isTrue();
    assertThat(afterB.value).isNull();
    // Two misses in flight: only the later one's answer is stored (a lookup
    // would take a ticket itself, so the entries are counted instead).
    AsyncValueCache.Address d = at("v", 9);
    AsyncValueCache.Lookup first = c.lookup(d);
    AsyncValueCache.Lookup second = c.lookup(d);
    int entries = c.entries();
    c.fill(d, first.ticket, value(4, 1));
    assertThat(c.entries()).as("after the older answer").isEqualTo(entries);
    c.fill(d, second.ticket, value(4, 2));
    assertThat(c.entries()).as("after the newer answer").isEqualTo(entries + 1);
    assertThat(c.lookup(d).value).isEqualTo(value(4, 2));
    // With nothing between, an answer fills the cache.
    AsyncValueCache.Address e = at("v", 10);
    AsyncValueCache.Lookup missE = c.lookup(e);
    c.fill(e, missE.ticket, null);
    assertThat(c.lookup(e).hit).isTrue();
  }

  @Test
  void invalidateDropsOneStateAndItsAnswersInFlight() {
    AsyncValueCache c = new AsyncValueCache(1 << 20);
    for (int i = 0; i < 100; i++) {
      c.write(at("v", i), value(8, i));
      c.write(at("r", i), value(8, i));
    }
    AsyncValueCache.Lookup pending = c.lookup(at("v", 500));
    long before = c.bytes();
    // Its writes must reach the daemon first.
    assertThatThrownBy(() -> c.invalidate("v")).hasMessageContaining("flush before invalidating");
    assertThat(c.takeDirty("v")).hasSize(100);
    c.invalidate("v");
    assertThat(c.entries()).isEqualTo(100);
    assertThat(c.bytes()).isEqualTo(before / 2);
    assertThat(c.lookup(at("v", 3)).hit).isFalse();
    assertThat(c.lookup(at("r", 3)).value).isEqualTo(value(8, 3));
    // An answer sent before the drop is in the old format: not stored.
    c.fill(at("v", 500), pending.ticket, value(8, 1));
    assertThat(c.lookup(at("v", 500)).hit).isFalse();
  }

  @Test
  void dirtyEntriesGoBackOnceAndAFillNeverEvictsThem() {
    long entry = at("v", 0).bytes() + 8 + AsyncValueCache.ENTRY_OVERHEAD;
    AsyncValueCache c = new AsyncValueCache(3 * entry);
    c.write(at("v", 1), value(8, 1));
    c.write(at("v", 1), value(8, 2));
    c.write(at("v", 2), null);
    java.util.List<AsyncValueCache.WriteBack> dirty = c.takeDirty(null);
    assertThat(dirty)
        .as("the newest value of each address written, a delete as null")
        .containsExactlyInAnyOrder(
            new AsyncValueCache.WriteBack(at("v", 1), value(8, 2)),
            new AsyncValueCache.WriteBack(at("v", 2), null));
    assertThat(c.takeDirty(null)).as("taken once").isEmpty();
    assertThat(c.lookup(at("v", 1)).value).as("still cached, clean").isEqualTo(value(8, 2));
    // Three dirty entries fill the cache; the answer to a miss is stored
    // over the bound rather than evict one (the response thread cannot send it).
    for (int i = 3; i <= 5; i++) {
      c.write(at("v", i), value(8, i));
    }
    java.util.List<AsyncValueCache.WriteBack> sent = new java.util.ArrayList<>();
    c.evict(sent);
    assertThat(sent).as("clean entries went first").isEmpty();
    AsyncValueCache.Lookup miss = c.lookup(at("v", 9));
    c.fill(at("v", 9), miss.ticket, value(8, 9));
    assertThat(c.bytes()).as("over the bound after the fill").isGreaterThan(3 * entry);
    assertThat(c.dirtyEntries()).isEqualTo(3);
    c.evict(sent);
    assertThat(sent)
        .as("the task thread's evict hands back the oldest dirty entry")
        .containsExactly(new AsyncValueCache.WriteBack(at("v", 3), value(8, 3)));
    assertThat(c.bytes()).isLessThanOrEqualTo(3 * entry);
  }

  /**
   * Keys that are serialized longs (mostly zero bytes) get distinct hashes: with {@link
   * ByteString#hashCode} about one in eight did, and the cache's hash map degraded into trees.
   */
  @Test
  void addressesOfNumberKeysHashApart() {
    java.util.Set<Integer> hashes = new java.util.HashSet<>();
    int n = 200_000;
    for (long k = 0; k < n; k++) {
      ByteString key = ByteString.copyFrom(java.nio.ByteBuffer.allocate(8).putLong(k).array());
      hashes.add(
          new AsyncValueCache.Address("count", (int) (k % 128), key, ByteString.EMPTY).hashCode());
    }
    assertThat(hashes.size()).as("distinct hashes of %d keys", n).isGreaterThan(n - n / 100);
    // Equal addresses are equal and hash alike.
    AsyncValueCache.Address a = at("v", 3);
    AsyncValueCache.Address b = at("v", 3);
    assertThat(a).isEqualTo(b).hasSameHashCodeAs(b).isNotEqualTo(at("w", 3));
  }

  @Test
  void capacityZeroHoldsNothingAndNegativeIsRefused() {
    AsyncValueCache c = new AsyncValueCache(0);
    assertThat(c.enabled()).isFalse();
    c.write(at("v", 1), value(4, 1));
    assertThat(c.lookup(at("v", 1)).hit).isFalse();
    assertThat(c.entries()).isZero();
    assertThatThrownBy(() -> new AsyncValueCache(-1))
        .isInstanceOf(IllegalArgumentException.class)
        .hasMessageContaining("-1");
  }
}
