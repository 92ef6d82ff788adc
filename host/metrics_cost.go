package host

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/statedhq/stated/tiered/cost"
)

// costCollector exports the object stores' requests by billing kind and
// the estimated bill of the last hour, labelled by store: "checkpoint",
// and "changelog" when the changelog has a store of its own.
type costCollector struct {
	c *costs

	requests, retries, throttled, measured, dollars *prometheus.Desc
}

func newCostCollector(c *costs) *costCollector {
	d := descs("stated_store_")
	return &costCollector{c: c,
		requests: d("requests_total", "Requests sent to an object store, by store and billing kind (put, get, list, delete, head): on S3 every HTTP attempt, multipart parts and retries included; on other stores the calls, one request each (see stated_store_requests_measured).", "store", "kind"),
		retries:  d("request_retries_total", "Requests of stated_store_requests_total that repeated a failed attempt.", "store", "kind"),
		throttled: d("throttled_total", "Answers that asked to slow down (503 SlowDown, 429, RequestLimitExceeded, Throttling), by store and kind; each was retried with backoff while the request's attempts lasted.",
			"store", "kind"),
		measured: d("requests_measured", "1 when the store's requests are counted on the wire (S3), 0 when they are its calls.", "store"),
		dollars: d("estimated_dollars_per_month", "The month's bill the last hour's requests (part=requests) and the checkpoint store's referenced state (part=storage) come to at --s3-prices.",
			"store", "part"),
	}
}

// Describe implements prometheus.Collector.
func (c *costCollector) Describe(ch chan<- *prometheus.Desc) { prometheus.DescribeByCollect(c, ch) }

// Collect implements prometheus.Collector.
func (c *costCollector) Collect(ch chan<- prometheus.Metric) {
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, labels...)
	}
	now := time.Now()
	cps := c.c.checkpoints()
	for _, s := range c.c.stores {
		r := s.meter.Requests()
		for k := range cost.NumKinds {
			counter(c.requests, r.Requests[k], s.name, k.String())
			counter(c.retries, r.Retries[k], s.name, k.String())
			counter(c.throttled, r.Throttled[k], s.name, k.String())
		}
		m := 0.0
		if s.meter.RequestsMeasured() {
			m = 1
		}
		gauge(c.measured, m, s.name)
		d := s.win.Since(cost.Sample{At: now, Requests: r, Checkpoints: cps})
		var state int64
		if s.name == storeCheckpoint {
			state = c.c.stateBytes()
		}
		est := c.c.prices.Monthly(d.Requests, d.Elapsed, state)
		gauge(c.dollars, est.RequestTotal(), s.name, "requests")
		gauge(c.dollars, est.Storage, s.name, "storage")
	}
}
