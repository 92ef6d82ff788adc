package io.stated.flink.jobs;

import java.lang.management.ManagementFactory;
import java.util.concurrent.atomic.AtomicLong;

/**
 * In-JVM timestamps that the benchmark reads to measure throughput and recovery time. They are
 * static, so they only mean something when the job runs in a MiniCluster inside the measuring JVM
 * (the benchmark's case); a job on a real cluster writes them in its TaskManagers, where nobody
 * reads them.
 */
public final class RecoveryProbe {
  private RecoveryProbe() {}

  /** Records processed by all keyed subtasks since the last {@link #reset()}. */
  public static final AtomicLong PROCESSED = new AtomicLong();

  /** System.nanoTime() of the first processed record, 0 before. */
  public static final AtomicLong FIRST_RECORD_NANOS = new AtomicLong();

  /** CPU time of this process (all threads, native ones included) at the first record. */
  public static final AtomicLong FIRST_RECORD_CPU_NANOS = new AtomicLong();

  /** CPU time of this process when the injected failure was thrown. */
  public static final AtomicLong FAILED_CPU_NANOS = new AtomicLong();

  /** System.nanoTime() when the injected failure was thrown, 0 before. */
  public static final AtomicLong FAILED_NANOS = new AtomicLong();

  /** {@link #PROCESSED} at the moment of the injected failure. */
  public static final AtomicLong PROCESSED_AT_FAILURE = new AtomicLong();

  /** System.nanoTime() when the last keyed subtask finished restoring its state. */
  public static final AtomicLong RESTORED_NANOS = new AtomicLong();

  /** Keyed subtasks that restored state since the last {@link #reset()}. */
  public static final AtomicLong RESTORES = new AtomicLong();

  public static void reset() {
    PROCESSED.set(0);
    FIRST_RECORD_NANOS.set(0);
    FAILED_NANOS.set(0);
    FIRST_RECORD_CPU_NANOS.set(0);
    FAILED_CPU_NANOS.set(0);
    PROCESSED_AT_FAILURE.set(0);
    RESTORED_NANOS.set(0);
    RESTORES.set(0);
  }

  static void recordProcessed() {
    if (PROCESSED.getAndIncrement() == 0) {
      FIRST_RECORD_NANOS.compareAndSet(0, System.nanoTime());
      FIRST_RECORD_CPU_NANOS.compareAndSet(0, processCpuNanos());
    }
  }

  static void recordFailure() {
    PROCESSED_AT_FAILURE.set(PROCESSED.get());
    FAILED_NANOS.set(System.nanoTime());
    FAILED_CPU_NANOS.set(processCpuNanos());
  }

  /**
   * CPU time used by this JVM process so far, or 0 where the platform does not say. On a shared
   * machine it measures the work a backend needs independent of how much CPU other processes left
   * it; wall-clock rates do not.
   */
  public static long processCpuNanos() {
    if (ManagementFactory.getOperatingSystemMXBean()
        instanceof com.sun.management.OperatingSystemMXBean os) {
      return Math.max(0, os.getProcessCpuTime());
    }
    return 0;
  }

  static void recordRestored() {
    RESTORED_NANOS.accumulateAndGet(System.nanoTime(), Math::max);
    RESTORES.incrementAndGet();
  }
}
