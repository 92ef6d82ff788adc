package io.stated.client;

import io.stated.api.v1.BatchResponse;
import io.stated.api.v1.Result;
import io.stated.api.v1.SnapshotOutcome;
import io.stated.api.v1.ViewOutcome;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/**
 * The answer to one batch request: one {@link Result} per operation, in order (the daemon's sparse
 * response expanded: an operation without an entry succeeded and returned nothing), and the
 * snapshot outcome when the request carried a barrier.
 */
public final class BatchResult {
  private final List<Result> results;
  private final SnapshotOutcome snapshot;
  private final ViewOutcome view;

  private BatchResult(List<Result> results, SnapshotOutcome snapshot, ViewOutcome view) {
    this.results = results;
    this.snapshot = snapshot;
    this.view = view;
  }

  /**
   * Expands {@code resp} for a request of {@code n} operations; throws if it names an index the
   * request does not have (a response that does not belong to the request).
   */
  static BatchResult expand(BatchResponse resp, int n) {
    List<Result> out = new ArrayList<>(Collections.nCopies(n, (Result) null));
    for (Result r : resp.getResultsList()) {
      if (r.getIndex() >= n) {
        throw new IllegalStateException(
            "result index "
                + r.getIndex()
                + " in the response to a request of "
                + n
                + " operations");
      }
      out.set(r.getIndex(), r);
    }
    for (int i = 0; i < n; i++) {
      if (out.get(i) == null) {
        out.set(i, Result.newBuilder().setIndex(i).build());
      }
    }
    return new BatchResult(
        Collections.unmodifiableList(out),
        resp.hasSnapshot() ? resp.getSnapshot() : null,
        resp.hasView() ? resp.getView() : null);
  }

  /** One result per operation of the request, in order. */
  public List<Result> results() {
    return results;
  }

  public Result get(int i) {
    return results.get(i);
  }

  /** The barrier's outcome, or null when the request carried none. */
  public SnapshotOutcome snapshot() {
    return snapshot;
  }

  /** The view barrier's outcome, or null when the request carried none. */
  public ViewOutcome view() {
    return view;
  }

  /** Throws the first failed operation's error as a {@link StatedException}; returns this. */
  public BatchResult check() {
    for (Result r : results) {
      if (r.getCode() != 0) {
        throw StatedException.of(r.getCode(), r.getError());
      }
    }
    return this;
  }

  /** The error of a failed result, or null for a successful one. */
  public static StatedException error(Result r) {
    return r.getCode() == 0 ? null : StatedException.of(r.getCode(), r.getError());
  }
}
