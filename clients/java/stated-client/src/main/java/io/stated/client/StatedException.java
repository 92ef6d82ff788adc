package io.stated.client;

import io.grpc.Status;
import io.grpc.StatusException;
import io.grpc.StatusRuntimeException;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;

/**
 * A failed call, batch stream, operation or snapshot. {@link #code()} is the gRPC status code the
 * daemon answered with and {@link #getMessage()} its text unchanged (it names the job, task, state
 * and key group involved), followed, for a daemon that cannot be reached, by what to do about it.
 */
public class StatedException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  private final Status.Code code;
  private final String daemonMessage;

  public StatedException(Status.Code code, String daemonMessage) {
    this(code, daemonMessage, daemonMessage, null);
  }

  StatedException(Status.Code code, String daemonMessage, String message, Throwable cause) {
    super(message, cause);
    this.code = code;
    this.daemonMessage = daemonMessage == null ? "" : daemonMessage;
  }

  /** The gRPC status code. */
  public Status.Code code() {
    return code;
  }

  /** The status code's name, e.g. {@code NOT_FOUND}. */
  public String codeName() {
    return code.name();
  }

  /** The daemon's text alone, without any hint the client added. */
  public String daemonMessage() {
    return daemonMessage;
  }

  /** A code from a {@code Result} or {@code SnapshotOutcome} (a google.rpc.Code number). */
  public static StatedException of(int code, String message) {
    return new StatedException(Status.fromCodeValue(code).getCode(), message);
  }

  /**
   * The exception for {@code t}: a {@link StatedException} as it is, a gRPC status as its code and
   * description, anything else as {@code INTERNAL} naming it. {@code where} describes the daemon
   * for the hint that follows an {@code UNAVAILABLE} (null: no hint).
   */
  public static StatedException from(Throwable t, String where) {
    Throwable c = t;
    while ((c instanceof CompletionException || c instanceof ExecutionException)
        && c.getCause() != null) {
      c = c.getCause();
    }
    if (c instanceof StatedException) {
      return (StatedException) c;
    }
    Status s = null;
    if (c instanceof StatusRuntimeException) {
      s = ((StatusRuntimeException) c).getStatus();
    } else if (c instanceof StatusException) {
      s = ((StatusException) c).getStatus();
    }
    if (s == null) {
      return new StatedException(Status.Code.INTERNAL, String.valueOf(c), String.valueOf(c), c);
    }
    String text = s.getDescription() != null ? s.getDescription() : "";
    if (s.getCause() != null && text.isEmpty()) {
      text = String.valueOf(s.getCause());
    }
    String msg = text;
    if (s.getCode() == Status.Code.UNAVAILABLE && where != null) {
      msg =
          "cannot reach the stated daemon at "
              + where
              + ": "
              + text
              + " (is it running? start it with `stated serve`, and check the socket or address"
              + " the client was given)";
    }
    return new StatedException(s.getCode(), text, msg, c);
  }

  /**
   * Waits for {@code f} and returns its value, throwing its failure as a {@link StatedException}
   * (interruption as {@code CANCELLED}, with the thread's interrupt flag set again).
   */
  public static <T> T await(java.util.concurrent.Future<T> f) {
    try {
      return f.get();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new StatedException(Status.Code.CANCELLED, "interrupted", "interrupted", e);
    } catch (ExecutionException e) {
      throw from(e, null);
    }
  }
}
