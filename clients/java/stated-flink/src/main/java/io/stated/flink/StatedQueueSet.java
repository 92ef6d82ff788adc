package io.stated.flink;

import com.google.protobuf.ByteString;
import io.stated.api.v1.MapEntry;
import io.stated.api.v1.Op;
import io.stated.api.v1.OpType;
import io.stated.api.v1.Result;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.Iterator;
import java.util.List;
import java.util.NoSuchElementException;
import java.util.TreeSet;
import javax.annotation.Nonnull;
import javax.annotation.Nullable;
import org.apache.flink.api.common.typeutils.TypeSerializer;
import org.apache.flink.core.memory.DataInputDeserializer;
import org.apache.flink.core.memory.DataOutputSerializer;
import org.apache.flink.runtime.state.InternalPriorityQueue;
import org.apache.flink.runtime.state.heap.HeapPriorityQueueElement;
import org.apache.flink.util.CloseableIterator;
import org.apache.flink.util.FlinkRuntimeException;

/**
 * One key group's part of a priority queue (timers) kept in the daemon, with the queue's head
 * cached in the JVM.
 *
 * <p>The elements are the entries of a daemon map state: key group {@link #keyGroup}, empty key and
 * namespace, the element in Flink's byte-ordered serializer as the user key, an empty value. The
 * daemon keeps a map's user keys in bytewise order, which for a byte-ordered serializer (the timer
 * service's) is the queue's order, so the smallest elements are the first entries of a MAP_ITERATE.
 * Every add and remove is written through to the daemon without waiting; the JVM keeps the smallest
 * {@link #CACHE_CAPACITY} elements in {@link #cache}, so peek and poll read the daemon only when
 * the cache ran empty while the daemon holds more.
 *
 * <p>The invariant: every element in the daemon smaller than the cache's largest is in the cache
 * (the cache is a prefix of the set); {@link #allInCache} says the cache is the whole set. A refill
 * therefore reads from after the last element removed from the cache ({@link #seekAfter}), never
 * over entries the daemon already deleted. This is RocksDB's caching queue set in Flink's RocksDB
 * backend, on the daemon's map instead of a column family.
 */
final class StatedQueueSet<T> implements InternalPriorityQueue<T>, HeapPriorityQueueElement {
  /** Elements cached per key group (as RocksDB's queue set caches). */
  static final int CACHE_CAPACITY = 128;

  private static final byte[] NO_BYTES = new byte[0];

  private final Daemon daemon;
  private final String state;
  private final int keyGroup;
  private final TypeSerializer<T> serializer;
  private final DataOutputSerializer out = new DataOutputSerializer(64);
  private final TreeSet<byte[]> cache = new TreeSet<>(Arrays::compareUnsigned);

  /** Whether the cache holds every element (true for a queue that was not restored). */
  private boolean allInCache;

  /** Where the next refill starts: after the last element the cache ran out with (null: first). */
  @Nullable private byte[] seekAfter;

  /** The deserialized head, kept between peek and poll. */
  @Nullable private T peekCache;

  private int internalIndex = HeapPriorityQueueElement.NOT_CONTAINED;

  /** Told of each element polled; null: nobody listens. */
  @Nullable private final Polled polled;

  /**
   * Who is told of each element handed out by {@link #poll}: the backend, which reads ahead the
   * state of the timers due with it ({@link StatedKeyedStateBackend#timerPolled}).
   */
  interface Polled {
    void polled(StatedQueueSet<?> set, Object element);
  }

  StatedQueueSet(
      Daemon daemon,
      String state,
      int keyGroup,
      TypeSerializer<T> serializer,
      boolean empty,
      @Nullable Polled polled) {
    this.daemon = daemon;
    this.state = state;
    this.keyGroup = keyGroup;
    this.serializer = serializer;
    this.allInCache = empty;
    this.polled = polled;
  }

  int keyGroup() {
    return keyGroup;
  }

  /**
   * Up to {@code n} of the elements a poll hands out next, from the cached head only (nothing is
   * read from the daemon), deserialized.
   */
  List<T> cachedHead(int n) {
    List<T> out = new ArrayList<>(Math.min(n, cache.size()));
    for (byte[] b : cache) {
      if (out.size() == n) {
        break;
      }
      out.add(deserialize(b));
    }
    return out;
  }

  /** The MAP_ITERATE that refills the cache (sent alone or batched with other key groups'). */
  Op refillOp() {
    return iterateOp(seekAfter, CACHE_CAPACITY);
  }

  /** A page of up to {@code limit} elements after {@code after} (null: from the first). */
  private Op iterateOp(@Nullable byte[] after, int limit) {
    Op.Builder b = daemon.op(OpType.OP_TYPE_MAP_ITERATE, state, keyGroup, NO_BYTES, NO_BYTES);
    if (after != null) {
      b.setUserKey(ByteString.copyFrom(after));
    }
    return b.setLimit(limit).build();
  }

  /** Whether a peek or poll would read the daemon first. */
  boolean needsRefill() {
    return !allInCache && cache.isEmpty();
  }

  /** Fills the cache from a MAP_ITERATE answer of {@link #refillOp}. */
  void refilled(Result r) {
    for (MapEntry e : r.getEntriesList()) {
      cache.add(e.getUserKey().toByteArray());
    }
    allInCache = !r.getMore();
  }

  private void refillIfNeeded() {
    if (needsRefill()) {
      refilled(daemon.read(refillOp()));
    }
  }

  private byte[] serialize(T element) {
    out.clear();
    try {
      serializer.serialize(element, out);
    } catch (IOException e) {
      throw new FlinkRuntimeException("cannot serialize an element of queue " + state, e);
    }
    return out.getCopyOfBuffer();
  }

  private T deserialize(byte[] b) {
    try {
      return serializer.deserialize(new DataInputDeserializer(b));
    } catch (IOException e) {
      throw new FlinkRuntimeException(
          "cannot read an element of queue " + state + " in key group " + keyGroup, e);
    }
  }

  private void write(OpType type, byte[] element) {
    daemon.write(
        daemon
            .op(type, state, keyGroup, NO_BYTES, NO_BYTES)
            .setUserKey(ByteString.copyFrom(element))
            .build());
  }

  @Nullable
  @Override
  public T poll() {
    refillIfNeeded();
    byte[] first = cache.pollFirst();
    if (first == null) {
      return null;
    }
    write(OpType.OP_TYPE_MAP_REMOVE, first);
    if (cache.isEmpty()) {
      seekAfter = first;
    }
    T head = peekCache != null ? peekCache : deserialize(first);
    peekCache = null;
    if (polled != null) {
      polled.polled(this, head);
    }
    return head;
  }

  @Nullable
  @Override
  public T peek() {
    refillIfNeeded();
    if (peekCache == null && !cache.isEmpty()) {
      peekCache = deserialize(cache.first());
    }
    return peekCache;
  }

  /** Returns whether the head changed. */
  @Override
  public boolean add(@Nonnull T toAdd) {
    refillIfNeeded();
    byte[] b = serialize(toAdd);
    if (cache.contains(b)) {
      return false;
    }
    boolean full = cache.size() >= CACHE_CAPACITY;
    if ((allInCache && !full)
        || (!cache.isEmpty() && Arrays.compareUnsigned(b, cache.last()) < 0)) {
      if (full) {
        // The largest cached element now lives in the daemon only.
        cache.pollLast();
        allInCache = false;
      }
      cache.add(b);
      write(OpType.OP_TYPE_MAP_PUT, b);
      if (cache.first() == b) {
        peekCache = null;
        return true;
      }
      return false;
    }
    // Not among the smallest: the daemon alone holds it (writing it again
    // when it is there already leaves one, as the set wants).
    write(OpType.OP_TYPE_MAP_PUT, b);
    allInCache = false;
    return false;
  }

  /** Returns whether the head changed (or may have). */
  @Override
  public boolean remove(@Nonnull T toRemove) {
    refillIfNeeded();
    byte[] oldHead = cache.isEmpty() ? null : cache.first();
    if (oldHead == null) {
      return false;
    }
    byte[] b = serialize(toRemove);
    write(OpType.OP_TYPE_MAP_REMOVE, b);
    cache.remove(b);
    if (cache.isEmpty()) {
      seekAfter = b;
      peekCache = null;
      return true;
    }
    if (oldHead != cache.first()) {
      peekCache = null;
      return true;
    }
    return false;
  }

  @Override
  public boolean isEmpty() {
    refillIfNeeded();
    return cache.isEmpty();
  }

  @Override
  public int size() {
    if (allInCache) {
      return cache.size();
    }
    int n = 0;
    for (Iterator<byte[]> it = elementBytes(); it.hasNext(); it.next()) {
      n++;
    }
    return n;
  }

  @Override
  public void addAll(@Nullable Collection<? extends T> toAdd) {
    if (toAdd != null) {
      for (T t : toAdd) {
        add(t);
      }
    }
  }

  @Nonnull
  @Override
  public CloseableIterator<T> iterator() {
    Iterator<byte[]> it = elementBytes();
    return CloseableIterator.adapterForIterator(
        new Iterator<T>() {
          @Override
          public boolean hasNext() {
            return it.hasNext();
          }

          @Override
          public T next() {
            return deserialize(it.next());
          }
        });
  }

  /**
   * Every element's bytes in order, read from the daemon page by page (or from the cache when it is
   * the whole set). The daemon sees every write sent before each page's read.
   */
  private Iterator<byte[]> elementBytes() {
    if (allInCache) {
      return new ArrayList<>(cache).iterator();
    }
    return new Iterator<byte[]>() {
      private List<MapEntry> page = List.of();
      private int pos;
      private byte[] after;
      private boolean more = true;

      @Override
      public boolean hasNext() {
        while (pos >= page.size() && more) {
          Result r = daemon.read(iterateOp(after, 1000));
          page = r.getEntriesList();
          pos = 0;
          more = r.getMore();
        }
        return pos < page.size();
      }

      @Override
      public byte[] next() {
        if (!hasNext()) {
          throw new NoSuchElementException();
        }
        after = page.get(pos++).getUserKey().toByteArray();
        return after;
      }
    };
  }

  @Override
  public int getInternalIndex() {
    return internalIndex;
  }

  @Override
  public void setInternalIndex(int newIndex) {
    internalIndex = newIndex;
  }
}
