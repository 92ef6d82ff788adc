package io.stated.flink.jobs;

import java.time.LocalDateTime;
import java.util.SplittableRandom;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.connector.datagen.source.GeneratorFunction;
import org.apache.flink.types.Row;

/**
 * Nexmark's bid stream, as its generator shapes it, for {@link NexmarkBench}: a pure function of
 * the bid's index and a seed, so that the benchmark computes the expected result of its query from
 * the same bids.
 *
 * <p>Nexmark's generator emits events in cycles of 50: one new person, three new auctions, then 46
 * bids. A bid goes with probability 1/2 to the "hot" auction (the newest auction, rounded down to
 * an even id) and otherwise to one of the last 100 auctions or the next 10; its price is {@code
 * round(10^(6u) * 100)} cents for a uniform {@code u}. So about half the bids of any stretch of the
 * stream go to one or two keys, which change every few dozen events, and the rest spread over about
 * a hundred recent ones: skewed, hot keys with small state, the opposite of the cold-key
 * benchmarks. Only the fields Nexmark's query 17 reads are generated (no bidder, channel, url or
 * extra); the event time advances 1 ms per event of the whole stream (persons and auctions
 * included), from 2015-07-15 00:00, so a run of under 86 million events stays within one day.
 */
final class NexmarkBids implements GeneratorFunction<Long, Row> {
  private static final long serialVersionUID = 1L;

  static final int EVENTS_PER_CYCLE = 50;
  static final int AUCTIONS_PER_CYCLE = 3;
  static final int BIDS_PER_CYCLE = 46;

  /** Nexmark's hotAuctionRatio: 1 bid in this many goes to a recent auction, the rest are hot. */
  static final int HOT_AUCTION_RATIO = 2;

  /** Nexmark's numInFlightAuctions and AUCTION_ID_LEAD. */
  static final int IN_FLIGHT_AUCTIONS = 100;

  static final int AUCTION_ID_LEAD = 10;
  static final long FIRST_AUCTION_ID = 1000;
  static final LocalDateTime BASE_TIME = LocalDateTime.of(2015, 7, 15, 0, 0);

  /**
   * The rows' type: named columns, the time a TIMESTAMP for SQL (a POJO's LocalDateTime field would
   * reach the Table API as a RAW type).
   */
  static final TypeInformation<Row> TYPE =
      Types.ROW_NAMED(
          new String[] {"auction", "price", "dateTime", "emitted"},
          Types.LONG,
          Types.LONG,
          Types.LOCAL_DATE_TIME,
          Types.LONG);

  private final long seed;
  private final boolean stampEmission;

  /**
   * @param stampEmission set the column {@code emitted} to {@link System#nanoTime()} when the
   *     source emits the bid (for latencies); otherwise 0
   */
  NexmarkBids(long seed, boolean stampEmission) {
    this.seed = seed;
    this.stampEmission = stampEmission;
  }

  @Override
  public Row map(Long index) {
    Bid b = bid(index, seed);
    return Row.of(b.auction, b.price, b.dateTime, stampEmission ? System.nanoTime() : 0L);
  }

  /** The bid at {@code index} (0-based, counting bids only). */
  static Bid bid(long index, long seed) {
    long cycle = index / BIDS_PER_CYCLE;
    // The event number in the whole stream: the cycle's person and auctions come first.
    long event =
        cycle * EVENTS_PER_CYCLE + (EVENTS_PER_CYCLE - BIDS_PER_CYCLE) + index % BIDS_PER_CYCLE;
    long lastAuction = cycle * AUCTIONS_PER_CYCLE + AUCTIONS_PER_CYCLE - 1;
    SplittableRandom r = new SplittableRandom(EventGenerator.mix64(index ^ seed));
    long auction;
    if (r.nextInt(HOT_AUCTION_RATIO) > 0) {
      auction = (lastAuction / HOT_AUCTION_RATIO) * HOT_AUCTION_RATIO;
    } else {
      long min = Math.max(lastAuction - IN_FLIGHT_AUCTIONS, 0);
      auction = min + r.nextLong(lastAuction - min + 1 + AUCTION_ID_LEAD);
    }
    long price = Math.round(Math.pow(10.0, r.nextDouble() * 6.0) * 100.0);
    return new Bid(FIRST_AUCTION_ID + auction, price, BASE_TIME.plusNanos(event * 1_000_000L));
  }

  /** A bid's fields that query 17 reads. */
  record Bid(long auction, long price, LocalDateTime dateTime) {}
}
