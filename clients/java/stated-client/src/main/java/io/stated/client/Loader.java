package io.stated.client;

import io.grpc.CallOptions;
import io.grpc.ClientCall;
import io.grpc.Status;
import io.grpc.stub.ClientCallStreamObserver;
import io.grpc.stub.ClientCalls;
import io.grpc.stub.ClientResponseObserver;
import io.stated.api.v1.LoadRequest;
import io.stated.api.v1.LoadResponse;
import io.stated.api.v1.ViewEntry;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/**
 * A bulk load into an instance (the Load call): entries go out in requests of about 1 MiB, and
 * {@link #add} waits while gRPC's outbound buffer is full (HTTP/2 flow control is the
 * back-pressure). {@link #finish} ends the stream and returns the daemon's count. Not thread-safe:
 * one thread loads.
 */
public final class Loader implements AutoCloseable {
  static final int REQUEST_BYTES = 1 << 20;

  private final Instance inst;
  private final CompletableFuture<LoadResponse> result = new CompletableFuture<>();
  private final Object ready = new Object();
  private ClientCallStreamObserver<LoadRequest> out;
  private LoadRequest.Builder next;
  private long nextBytes;
  private boolean first = true;
  private boolean finished;

  Loader(Instance inst) {
    this.inst = inst;
    ClientCall<LoadRequest, LoadResponse> call =
        inst.client().channel().newCall(StatedGrpc.LOAD, CallOptions.DEFAULT);
    ClientCalls.asyncClientStreamingCall(
        call,
        new ClientResponseObserver<LoadRequest, LoadResponse>() {
          @Override
          public void beforeStart(ClientCallStreamObserver<LoadRequest> s) {
            out = s;
            s.setOnReadyHandler(
                () -> {
                  synchronized (ready) {
                    ready.notifyAll();
                  }
                });
          }

          @Override
          public void onNext(LoadResponse v) {
            result.complete(v);
          }

          @Override
          public void onError(Throwable t) {
            result.completeExceptionally(StatedException.from(t, inst.client().where()));
            synchronized (ready) {
              ready.notifyAll();
            }
          }

          @Override
          public void onCompleted() {
            if (!result.isDone()) {
              result.completeExceptionally(
                  new StatedException(Status.Code.INTERNAL, "Load returned nothing"));
            }
          }
        });
    next = newRequest();
  }

  private LoadRequest.Builder newRequest() {
    LoadRequest.Builder b = LoadRequest.newBuilder();
    if (first) {
      b.setInstanceId(inst.id()).setJob(inst.job());
      first = false;
    }
    return b;
  }

  /** Queues one entry (its state named by {@code ViewEntry.state}). */
  public void add(ViewEntry e) {
    if (finished) {
      throw new IllegalStateException("the load is finished");
    }
    next.addEntries(e);
    nextBytes += e.getSerializedSize();
    if (nextBytes >= REQUEST_BYTES) {
      sendNext();
    }
  }

  private void sendNext() {
    if (next.getEntriesCount() == 0 && next.getInstanceId().isEmpty()) {
      return;
    }
    synchronized (ready) {
      while (!out.isReady() && !result.isDone()) {
        try {
          ready.wait(TimeUnit.SECONDS.toMillis(1));
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
          out.cancel("interrupted", e);
          throw new StatedException(Status.Code.CANCELLED, "interrupted while loading");
        }
      }
    }
    if (result.isDone()) {
      // The call ended early: its error says why.
      StatedException.await(result);
      throw new StatedException(Status.Code.INTERNAL, "Load answered before the client finished");
    }
    out.onNext(next.build());
    next = newRequest();
    nextBytes = 0;
  }

  /** Sends what is queued, ends the stream and waits for the daemon's answer. */
  public LoadResponse finish() {
    if (!finished) {
      sendNext();
      finished = true;
      out.onCompleted();
    }
    return StatedException.await(result);
  }

  /** Cancels a load that was not finished. */
  @Override
  public void close() {
    if (!finished) {
      finished = true;
      out.cancel("load abandoned", null);
    }
  }
}
