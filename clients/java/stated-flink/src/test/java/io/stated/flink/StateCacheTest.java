package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.ByteBuffer;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The cache's bound, eviction order and completeness, without a daemon. */
class StateCacheTest {
  private static byte[] key(int i) {
    return ByteBuffer.allocate(4).putInt(i).array();
  }

  private static final byte[] NS = {0};

  @Test
  void staysWithinItsBytesWhateverIsWritten() {
    long capacity = 64 << 10;
    StateCache c = new StateCache(capacity);
    c.markComplete("v");
    for (int i = 0; i < 10_000; i++) {
      c.put("v", key(i), NS, new StateCache.ValueNode(new byte[1024]));
      assertThat(c.bytes()).isLessThanOrEqualTo(capacity);
    }
    // What it holds really is within the bound: 1 KiB values, at most 64.
    assertThat(c.entries()).isBetween(1, 64);
    assertThat((long) c.entries() * 1024).isLessThanOrEqualTo(capacity);
    assertThat(c.evictions()).isPositive();
    // An eviction ends completeness: a miss no longer means absent.
    assertThat(c.complete("v")).isFalse();
    // The most recent entries stay, the oldest left.
    assertThat(c.get("v", key(9_999), NS)).isNotNull();
    assertThat(c.get("v", key(0), NS)).isNull();
  }

  @Test
  void nodesThatGrowInPlaceAreCountedAndEvicted() {
    long capacity = 32 << 10;
    StateCache c = new StateCache(capacity);
    StateCache.ListNode other = new StateCache.ListNode(List.of(new byte[2000]));
    c.put("l", key(1), NS, other);
    StateCache.ListNode l = new StateCache.ListNode(List.of());
    c.put("l", key(2), NS, l);
    for (int i = 0; i < 29; i++) {
      l.add(new byte[1024]);
      c.resized(l);
      assertThat(c.bytes()).isLessThanOrEqualTo(capacity);
    }
    // The other, least recently used, went first.
    assertThat(c.get("l", key(1), NS)).isNull();
    assertThat(c.get("l", key(2), NS)).isSameAs(l);
    for (int i = 0; i < 40; i++) {
      l.add(new byte[1024]);
      c.resized(l);
    }
    // Alone bigger than the cache: it left too.
    assertThat(c.get("l", key(2), NS)).isNull();
    assertThat(c.bytes()).isZero();

    StateCache.MapNode m = new StateCache.MapNode(true);
    c.put("m", key(3), NS, m);
    long before = c.bytes();
    m.set(key(7), new byte[500]);
    c.resized(m);
    assertThat(c.bytes()).isGreaterThanOrEqualTo(before + 500);
    m.set(key(7), StateCache.ABSENT);
    c.resized(m);
    assertThat(c.bytes()).isEqualTo(before);
  }

  @Test
  void offStoresNothingAndIsNeverComplete() {
    StateCache c = new StateCache(0);
    c.markComplete("v");
    c.put("v", key(1), NS, new StateCache.ValueNode(new byte[1]));
    assertThat(c.get("v", key(1), NS)).isNull();
    assertThat(c.complete("v")).isFalse();
    assertThat(c.bytes()).isZero();
    assertThatThrownBy(() -> new StateCache(-1)).hasMessageContaining("must not be negative");
  }

  @Test
  void absencesAndInvalidation() {
    StateCache c = new StateCache(1 << 20);
    c.markComplete("v");
    c.put("v", key(1), NS, new StateCache.ValueNode(new byte[] {1}));
    // A complete state forgets an absent entry instead of storing it.
    c.putAbsent("v", key(1), NS, new StateCache.ValueNode(null));
    assertThat(c.get("v", key(1), NS)).isNull();
    assertThat(c.complete("v")).isTrue();
    // An incomplete one keeps the absence (a negative entry).
    c.put("w", key(1), NS, new StateCache.ValueNode(new byte[] {1}));
    c.putAbsent("w", key(1), NS, new StateCache.ValueNode(null));
    StateCache.Node n = c.get("w", key(1), NS);
    assertThat(n).isNotNull();
    assertThat(((StateCache.ValueNode) n).value).isNull();
    c.invalidate("v");
    c.invalidate("w");
    assertThat(c.complete("v")).isFalse();
    assertThat(c.entries()).isZero();
    assertThat(c.bytes()).isZero();
  }

  @Test
  void aTrackedStateKnowsNeverWrittenAddressesAfterEvictions() {
    long capacity = 16 << 20;
    StateCache c = new StateCache(capacity);
    c.markComplete("v");
    for (int i = 0; i < 20_000; i++) {
      c.written("v", key(i), NS);
      c.put("v", key(i), NS, new StateCache.ValueNode(new byte[1024]));
      assertThat(c.bytes()).isLessThan(capacity);
    }
    assertThat(c.evictions()).isPositive();
    assertThat(c.complete("v")).isFalse();
    // Written, then evicted: the daemon has it, so the cache must not say absent.
    int evicted = 0;
    for (int i = 0; i < 20_000; i++) {
      if (c.peek("v", key(i), NS) == null) {
        evicted++;
        assertThat(c.knownAbsent("v", key(i), NS)).as("key %d", i).isFalse();
      }
    }
    assertThat(evicted).isPositive();
    // Never written: absent without asking, but for the filter's rare false positives.
    int known = 0;
    for (int i = 20_000; i < 40_000; i++) {
      if (c.knownAbsent("v", key(i), NS)) {
        known++;
      }
    }
    assertThat(known).isGreaterThan(19_600);
    assertThat(c.filterAnswers()).isEqualTo(known);
    // The same key in another namespace is another address.
    assertThat(c.knownAbsent("v", key(1), new byte[] {1})).isTrue();
    // A state that was never complete is not tracked: a miss says nothing.
    c.written("w", key(1), NS);
    assertThat(c.knownAbsent("w", key(40_001), NS)).isFalse();
    // Invalidation (the stored bytes changed under the cache) ends the tracking.
    c.invalidate("v");
    assertThat(c.knownAbsent("v", key(30_000), NS)).isFalse();
  }
}
