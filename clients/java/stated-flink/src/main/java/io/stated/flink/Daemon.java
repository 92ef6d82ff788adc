package io.stated.flink;

import com.google.protobuf.ByteString;
import io.stated.api.v1.Op;
import io.stated.api.v1.OpType;
import io.stated.api.v1.Result;
import io.stated.client.Instance;
import io.stated.client.StatedException;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicReference;

/**
 * The keyed backend's access to its daemon instance, from the task thread: writes are submitted
 * without waiting (a failure surfaces at the next operation or snapshot), reads flush what is
 * queued and wait for their answer, which the stream's order makes see every earlier write.
 */
final class Daemon {
  private final Instance inst;
  private final AtomicReference<StatedException> writeFailure = new AtomicReference<>();
  private final java.util.concurrent.atomic.LongAdder roundTrips =
      new java.util.concurrent.atomic.LongAdder();

  Daemon(Instance inst) {
    // State accesses complete or fail with the stream, as a heap access
    // is not cut short by an interrupt either (Flink's own tests read
    // state from threads they interrupt).
    this.inst = inst.uninterruptibleSends(true);
  }

  Instance instance() {
    return inst;
  }

  /** Reads that waited for the daemon ({@link #read}, {@link #readAll}): what the cache saves. */
  long roundTrips() {
    return roundTrips.sum();
  }

  /**
   * Throws the first failure of a write submitted earlier, if any, or the stream's end: a read the
   * cache answers still fails once the daemon is gone, as soon as the stream has seen it.
   */
  void check() {
    StatedException dead = inst.failure();
    if (dead != null) {
      throw new StatedException(
          dead.code(), "the batch stream to the stated daemon ended: " + dead.getMessage());
    }
    StatedException e = writeFailure.get();
    if (e != null) {
      throw new StatedException(
          e.code(), "an earlier state write failed in the stated daemon: " + e.getMessage());
    }
  }

  Op.Builder op(OpType type, String state, int keyGroup, byte[] key, byte[] ns) {
    return Op.newBuilder()
        .setType(type)
        .setState(state)
        .setKeyGroup(keyGroup)
        .setKey(ByteString.copyFrom(key))
        .setNamespace(ByteString.copyFrom(ns));
  }

  /** Submits a write; its failure is kept for {@link #check}. */
  void write(Op op) {
    check();
    inst.submit(op)
        .whenComplete(
            (r, err) -> {
              if (err != null) {
                writeFailure.compareAndSet(null, StatedException.from(err, null));
              }
            });
  }

  /** Sends a read behind every queued write and waits for its result. */
  Result read(Op op) {
    check();
    roundTrips.increment();
    CompletableFuture<Result> f = inst.submit(op);
    inst.flush();
    return await(f);
  }

  /**
   * Waits for an answer even when the thread is interrupted (the interrupt flag is set again
   * after): a state read completes or fails with the daemon's error, as a heap read would not be
   * cut short by an interrupt either. The stream's end fails it, so it never hangs on a dead
   * daemon.
   */
  static <T> T await(CompletableFuture<T> f) {
    boolean interrupted = false;
    try {
      while (true) {
        try {
          return f.get();
        } catch (InterruptedException e) {
          interrupted = true;
        } catch (java.util.concurrent.ExecutionException e) {
          throw StatedException.from(e, null);
        }
      }
    } finally {
      if (interrupted) {
        Thread.currentThread().interrupt();
      }
    }
  }

  /** Sends several reads in one request and waits for them. */
  List<Result> readAll(List<Op> ops) {
    List<CompletableFuture<Result>> fs = sendReads(ops);
    List<Result> out = new ArrayList<>(ops.size());
    for (CompletableFuture<Result> f : fs) {
      out.add(await(f));
    }
    return out;
  }

  /**
   * Sends several reads behind every queued write (one request, or more when they exceed the
   * daemon's batch limits) and returns their futures, for a caller that treats their failures one
   * by one.
   */
  List<CompletableFuture<Result>> sendReads(List<Op> ops) {
    check();
    roundTrips.increment();
    List<CompletableFuture<Result>> fs = new ArrayList<>(ops.size());
    for (Op op : ops) {
      fs.add(inst.submit(op));
    }
    inst.flush();
    return fs;
  }

  /**
   * The result of a read sent by {@link #sendReads}, or null when it failed: for reads whose
   * failure costs nothing but the read (a read ahead the daemon refused, e.g. past its response
   * size limit). A failure of the stream itself shows at the next {@link #check}.
   */
  static Result resultOrNull(CompletableFuture<Result> f) {
    try {
      return await(f);
    } catch (StatedException e) {
      return null;
    }
  }

  /** Waits until every write sent so far was applied (and checks them). */
  void sync() {
    StatedException.await(inst.send(List.of()));
    check();
  }
}
