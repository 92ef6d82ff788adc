package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;

import com.google.protobuf.ByteString;
import io.stated.api.v1.StateKind;
import io.stated.api.v1.ViewEntry;
import org.junit.jupiter.api.Test;

/**
 * What a restore leaves in the cache: complete states only while nothing of them was evicted, and
 * whole map nodes only for maps whose every entry the node took.
 */
class RestoreCacheWarmerTest {
  private static final byte[] NS = {0};

  private static ViewEntry value(int kg, String state, int key, int valueBytes) {
    return ViewEntry.newBuilder()
        .setKeyGroup(kg)
        .setState(state)
        .setKind(StateKind.STATE_KIND_VALUE)
        .setKey(ByteString.copyFrom(new byte[] {(byte) key}))
        .setNamespace(ByteString.copyFrom(NS))
        .setValue(ByteString.copyFrom(new byte[valueBytes]))
        .build();
  }

  private static ViewEntry mapEntry(int kg, String state, int key, int userKey) {
    return ViewEntry.newBuilder()
        .setKeyGroup(kg)
        .setState(state)
        .setKind(StateKind.STATE_KIND_MAP)
        .setKey(ByteString.copyFrom(new byte[] {(byte) key}))
        .setNamespace(ByteString.copyFrom(NS))
        .setUserKey(ByteString.copyFrom(new byte[] {(byte) userKey}))
        .setValue(ByteString.copyFrom(new byte[] {0, 7}))
        .build();
  }

  private static StateCache.MapNode map(StateCache c, String state, int key) {
    return (StateCache.MapNode) c.peek(state, new byte[] {(byte) key}, NS);
  }

  @Test
  void statesThatFitAreCompleteOthersNot() {
    StateCache c = new StateCache(10_000);
    RestoreCacheWarmer w = new RestoreCacheWarmer(c);
    w.state("small");
    w.state("big");
    w.state("empty");
    for (int k = 0; k < 20; k++) {
      w.add(value(0, "big", k, 1000));
    }
    // Restored last, so the least recently used are big's.
    w.add(value(1, "small", 1, 10));
    w.add(value(1, "small", 2, 10));
    assertThat(c.complete("small")).isTrue();
    assertThat(c.complete("empty")).isTrue();
    assertThat(c.complete("big")).isFalse();
    assertThat(c.bytes()).isLessThanOrEqualTo(10_000);
    // The last restored entries stay.
    assertThat(c.peek("big", new byte[] {19}, NS)).isNotNull();
    assertThat(c.peek("big", new byte[] {0}, NS)).isNull();
    // A state a later handle lists again is not made complete again.
    w.state("big");
    assertThat(c.complete("big")).isFalse();
  }

  @Test
  void aMapMetAgainAfterItsNodeWasEvictedIsNotWhole() {
    // Room for a couple of entries: map 1's node is evicted by map 2's.
    StateCache c = new StateCache(2 * (StateCache.ENTRY_OVERHEAD + 1000));
    RestoreCacheWarmer w = new RestoreCacheWarmer(c);
    w.state("m");
    w.state("v");
    w.add(mapEntry(0, "m", 1, 1));
    w.add(mapEntry(0, "m", 1, 2));
    assertThat(map(c, "m", 1).whole).isTrue();
    w.add(value(0, "v", 9, 1000));
    w.add(value(0, "v", 8, 1000));
    assertThat(map(c, "m", 1)).isNull();
    w.add(mapEntry(0, "m", 1, 3));
    StateCache.MapNode n = map(c, "m", 1);
    assertThat(n.whole).isFalse();
    // User key 1 is in the daemon only: unknown here, not absent.
    assertThat(n.lookup(new byte[] {1})).isNull();
    assertThat(n.lookup(new byte[] {3})).isNotNull();
    assertThat(c.complete("m")).isFalse();
    // The same key in another key group's pass is a first sighting again
    // (a real restore never has that; the set is per key group).
    w.add(mapEntry(1, "m", 2, 1));
    assertThat(map(c, "m", 2).whole).isTrue();
  }

  @Test
  void interleavedMapsStayWholeWhileCached() {
    StateCache c = new StateCache(1 << 20);
    RestoreCacheWarmer w = new RestoreCacheWarmer(c);
    w.state("m");
    w.add(mapEntry(0, "m", 1, 1));
    w.add(mapEntry(0, "m", 2, 1));
    w.add(mapEntry(0, "m", 1, 2));
    StateCache.MapNode n = map(c, "m", 1);
    assertThat(n.whole).isTrue();
    assertThat(n.lookup(new byte[] {1})).isNotNull();
    assertThat(n.lookup(new byte[] {2})).isNotNull();
    assertThat(n.lookup(new byte[] {3})).isSameAs(StateCache.ABSENT);
    assertThat(c.complete("m")).isTrue();
  }

  @Test
  void aDisabledCacheTakesNothing() {
    StateCache c = new StateCache(0);
    RestoreCacheWarmer w = new RestoreCacheWarmer(c);
    w.state("v");
    w.add(value(0, "v", 1, 10));
    assertThat(c.entries()).isZero();
    assertThat(c.complete("v")).isFalse();
  }
}
