package io.stated.client;

/**
 * {@link ConformanceTest} with every instance's batch stream on the Batch call (gRPC) rather than
 * the daemon's batch socket: both transports pass the same checklist.
 */
class ConformanceGrpcTest extends ConformanceTest {
  @Override
  boolean batchSocket() {
    return false;
  }
}
