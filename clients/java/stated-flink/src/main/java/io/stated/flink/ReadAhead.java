package io.stated.flink;

/**
 * Which of a key's other states to read along with a read that misses the cache.
 *
 * <p>A miss is a round trip to the daemon, about ten times what the daemon spends on one more point
 * read in the same request. Operators read several states of a key per record or timer (a window's
 * list and its sum, a key's counters), so when one misses the others usually miss right after it,
 * each a round trip of its own. This class learns which states are read together: a <em>context
 * </em> is what the task does under one current key (from one {@code setCurrentKey} to the next),
 * and for each state it counts the contexts that read it and, per other state, the contexts that
 * read both. A miss of state A then takes along every state read in at least a quarter of A's
 * contexts; what it fetches goes into the cache as any read's answer does, so a wrong guess costs a
 * daemon read and some cache space, never a wrong answer.
 *
 * <p>Timers add a second direction. Timers due at the same time fire one after another (a window's
 * end, the end of input), each reading the same states of its own key; when a read misses while one
 * fires, the backend also reads those states of the keys of the timers due with it, from its key
 * group's cached queue head ({@link StatedKeyedStateBackend#readMiss}), so that their firings find
 * them cached: one round trip for up to {@link StatedKeyedStateBackend#DUE_TIMERS_AHEAD} firings
 * instead of one or more each.
 *
 * <p>Counts are halved when a state's contexts reach {@link #DECAY_AT}, so the choice follows a job
 * whose access pattern changes. A state takes nothing along before {@link #WARM_UP} contexts. Only
 * the first {@link #MAX_STATES} states of a backend take part (a bit each in a long). Used from the
 * task thread only.
 */
final class ReadAhead {
  /** States that take part: one bit each in a context's mask. */
  static final int MAX_STATES = 64;

  /** Contexts a state must have been read in before its misses take others along. */
  static final int WARM_UP = 16;

  /** A state's contexts at which its counts are halved. */
  static final int DECAY_AT = 1024;

  /** Contexts per state (index: the state's id). */
  private final int[] contexts = new int[MAX_STATES];

  /** Contexts that read both states, [A][B]; allocated per row when A is first counted. */
  private final int[][] together = new int[MAX_STATES][];

  /** The states read in the current context. */
  private long readNow;

  /** Records that state {@code id} was read in the current context. */
  void read(int id) {
    if (id < MAX_STATES) {
      readNow |= 1L << id;
    }
  }

  /** Ends the current context: counts which states it read, and which of them together. */
  void endContext() {
    long m = readNow;
    if (m == 0) {
      return;
    }
    readNow = 0;
    for (long a = m; a != 0; a &= a - 1) {
      int i = Long.numberOfTrailingZeros(a);
      int[] row = together[i];
      if (row == null) {
        row = together[i] = new int[MAX_STATES];
      }
      for (long b = m & ~(1L << i); b != 0; b &= b - 1) {
        row[Long.numberOfTrailingZeros(b)]++;
      }
      if (++contexts[i] >= DECAY_AT) {
        contexts[i] >>= 1;
        for (int j = 0; j < MAX_STATES; j++) {
          row[j] >>= 1;
        }
      }
    }
  }

  /** The states (a bit per id) to read along with a miss of state {@code id}. */
  long along(int id) {
    if (id >= MAX_STATES || contexts[id] < WARM_UP) {
      return 0;
    }
    int[] row = together[id];
    int c = contexts[id];
    long out = 0;
    for (int j = 0; j < MAX_STATES; j++) {
      // At least a quarter of the contexts: a daemon read in the same
      // request costs far less than the round trip it saves when it hits.
      if (j != id && row[j] * 4 >= c) {
        out |= 1L << j;
      }
    }
    return out;
  }
}
