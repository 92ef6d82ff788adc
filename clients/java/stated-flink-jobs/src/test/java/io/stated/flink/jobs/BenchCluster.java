package io.stated.flink.jobs;

import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.MemorySize;
import org.apache.flink.configuration.TaskManagerOptions;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;

/**
 * The MiniCluster each backend of the benchmarks ({@link AsyncStateBench}, {@link NexmarkBench})
 * runs in, the same for all so that their rows compare: one TaskManager with 512 MiB of managed
 * memory (RocksDB's and ForSt's caches and write buffers, stated's JVM-side cache) and the {@link
 * BenchMetrics} reporter, emptied of what earlier clusters reported.
 */
final class BenchCluster {
  static final MemorySize MANAGED_MEMORY = MemorySize.ofMebiBytes(512);

  private BenchCluster() {}

  /** A started cluster with {@code slots} slots; the caller closes it. */
  static MiniCluster start(int slots) throws Exception {
    Configuration conf = new Configuration();
    conf.set(TaskManagerOptions.MANAGED_MEMORY_SIZE, MANAGED_MEMORY);
    BenchMetrics.install(conf);
    BenchMetrics.reset();
    MiniCluster mc =
        new MiniCluster(
            new MiniClusterConfiguration.Builder()
                .setConfiguration(conf)
                .setNumTaskManagers(1)
                .setNumSlotsPerTaskManager(slots)
                .build());
    try {
      mc.start();
    } catch (Exception e) {
      mc.close();
      throw e;
    }
    return mc;
  }
}
