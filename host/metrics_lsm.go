package host

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/statedhq/stated/daemon/openers"
)

// lsmCacheCollector exports the shared lsm block cache's figures as
// stated_lsm_block_cache_*. Every lsm instance reads its index, filter and
// data blocks through that one cache; its hit ratio says whether
// --lsm-cache-size fits the state being read.
type lsmCacheCollector struct {
	stats         func() openers.BlockCacheStats
	bytes, blocks *prometheus.Desc
	hits, misses  *prometheus.Desc
}

func newLSMCacheCollector(stats func() openers.BlockCacheStats) *lsmCacheCollector {
	d := descs("stated_lsm_block_cache_")
	return &lsmCacheCollector{stats: stats,
		bytes:  d("bytes", "Bytes of blocks the shared lsm block cache holds (at most --lsm-cache-size plus the room of the open instances' memtables they do not use)."),
		blocks: d("blocks", "Blocks the shared lsm block cache holds."),
		hits:   d("hits_total", "Block reads of lsm instances the block cache answered."),
		misses: d("misses_total", "Block reads of lsm instances that went to a file (the page cache or the disk)."),
	}
}

func (c *lsmCacheCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.bytes, c.blocks, c.hits, c.misses} {
		ch <- d
	}
}

func (c *lsmCacheCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(s.Bytes))
	ch <- prometheus.MustNewConstMetric(c.blocks, prometheus.GaugeValue, float64(s.Blocks))
	ch <- prometheus.MustNewConstMetric(c.hits, prometheus.CounterValue, float64(s.Hits))
	ch <- prometheus.MustNewConstMetric(c.misses, prometheus.CounterValue, float64(s.Misses))
}
