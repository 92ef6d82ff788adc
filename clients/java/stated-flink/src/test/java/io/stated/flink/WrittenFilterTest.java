package io.stated.flink;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.ByteBuffer;
import org.junit.jupiter.api.Test;

/** The asynchronous backend's filter of written addresses ({@link WrittenFilter}). */
class WrittenFilterTest {
  private static final byte[] NS = new byte[0];

  private static byte[] key(long k) {
    return ByteBuffer.allocate(8).putLong(k).array();
  }

  @Test
  void writtenAddressesAreNeverKnownAbsentAcrossTheChain() {
    WrittenFilter f = new WrittenFilter(8 << 20);
    f.track("s");
    // Past the first filter's addresses: the chain grows.
    long n = 5 * WrittenFilter.FIRST_ADDRESSES;
    for (long k = 0; k < n; k++) {
      f.written(f.tracks("s"), "s", key(k), NS);
    }
    assertThat(f.bytes())
        .as("bytes of three filters")
        .isGreaterThan(
            BlockedBloomFilter.bytes(
                    WrittenFilter.FIRST_ADDRESSES, WrittenFilter.FIRST_BITS_PER_ADDRESS)
                * 3);
    for (long k = 0; k < n; k++) {
      assertThat(f.knownAbsent(f.tracks("s"), "s", key(k), NS))
          .as("written address %d", k)
          .isFalse();
    }
    // Unwritten addresses: nearly all known absent, under 2% wrong across the chain.
    long absent = 0;
    long probes = 200_000;
    for (long k = n; k < n + probes; k++) {
      if (f.knownAbsent(f.tracks("s"), "s", key(k), NS)) {
        absent++;
      }
    }
    assertThat(probes - absent).as("false positives of %d", probes).isLessThan(probes / 50);
    assertThat(f.answers()).isEqualTo(absent);
  }

  @Test
  void onlyTrackedStatesAreAnswered() {
    WrittenFilter f = new WrittenFilter(1 << 20);
    f.track("fresh");
    assertThat(f.knownAbsent(f.tracks("fresh"), "fresh", key(1), NS)).isTrue();
    assertThat(f.knownAbsent(f.tracks("restored"), "restored", key(1), NS))
        .as("untracked state")
        .isFalse();
    f.written(f.tracks("fresh"), "fresh", key(1), NS);
    assertThat(f.knownAbsent(f.tracks("fresh"), "fresh", key(1), NS)).isFalse();
    // Namespaces are part of the address; so is the state.
    assertThat(f.knownAbsent(f.tracks("fresh"), "fresh", key(1), new byte[] {1})).isTrue();
    f.track("other");
    assertThat(f.knownAbsent(f.tracks("other"), "other", key(1), NS)).isTrue();
  }

  @Test
  void pastItsBoundTheFilterStopsAnswering() {
    long first =
        BlockedBloomFilter.bytes(
            WrittenFilter.FIRST_ADDRESSES, WrittenFilter.FIRST_BITS_PER_ADDRESS);
    // Room for the first filter only.
    WrittenFilter f = new WrittenFilter(first + first / 2);
    f.track("s");
    for (long k = 0; k < WrittenFilter.FIRST_ADDRESSES; k++) {
      f.written(f.tracks("s"), "s", key(k), NS);
    }
    assertThat(f.enabled()).isTrue();
    assertThat(f.knownAbsent(f.tracks("s"), "s", key(-1), NS)).isTrue();
    // The next filter would not fit: tracking ends, nothing is answered.
    for (long k = WrittenFilter.FIRST_ADDRESSES; k < 2 * WrittenFilter.FIRST_ADDRESSES; k++) {
      f.written(f.tracks("s"), "s", key(k), NS);
    }
    assertThat(f.enabled()).isFalse();
    assertThat(f.bytes()).isZero();
    assertThat(f.knownAbsent(f.tracks("s"), "s", key(-1), NS)).as("after the bound").isFalse();
    f.track("t");
    assertThat(f.knownAbsent(f.tracks("t"), "t", key(-1), NS))
        .as("a state tracked after the bound")
        .isFalse();
  }

  @Test
  void sizeZeroIsOff() {
    WrittenFilter f = new WrittenFilter(0);
    f.track("s");
    assertThat(f.enabled()).isFalse();
    assertThat(f.knownAbsent(f.tracks("s"), "s", key(1), NS)).isFalse();
    assertThatThrownBy(() -> new WrittenFilter(-1)).isInstanceOf(IllegalArgumentException.class);
  }
}
