package host

import (
	"sync"
	"time"

	"github.com/statedhq/stated/host/webui"
	"github.com/statedhq/stated/tiered/cost"
	"github.com/statedhq/stated/tiered/metered"
)

// Sampling of the request counters for the last hour's figures.
const (
	costWindow = time.Hour
	costStep   = time.Minute
	costTick   = 15 * time.Second
)

// The store labels of the metrics and the page.
const (
	storeCheckpoint = "checkpoint"
	storeChangelog  = "changelog"
)

// costs keeps the request counts of the node's object stores over the
// last hour and prices them: the web page's requests table and the
// estimated bill in the metrics.
type costs struct {
	prices      cost.Prices
	stores      []*storeCosts
	checkpoints func() uint64
	// stateBytes is what the catalog references in the checkpoint store
	// (0: unknown, e.g. on a cluster follower).
	stateBytes func() int64

	stop chan struct{}
	done sync.WaitGroup
}

// storeCosts is one metered store's counts and window.
type storeCosts struct {
	name  string // "checkpoint", "changelog"
	meter *metered.Store
	win   *cost.Window
}

func newCosts(prices cost.Prices, checkpoints func() uint64, stateBytes func() int64) *costs {
	return &costs{prices: prices, checkpoints: checkpoints, stateBytes: stateBytes, stop: make(chan struct{})}
}

// add counts a store under name; nil is skipped.
func (c *costs) add(name string, m *metered.Store) {
	if m == nil {
		return
	}
	c.stores = append(c.stores, &storeCosts{name: name, meter: m, win: cost.NewWindow(costWindow, costStep)})
}

// sample records every store's counts now.
func (c *costs) sample(now time.Time) {
	cps := c.checkpoints()
	for _, s := range c.stores {
		s.win.Observe(cost.Sample{At: now, Requests: s.meter.Requests(), Checkpoints: cps})
	}
}

// start samples at once and then every costTick until close: reading the
// counters makes no request.
func (c *costs) start() {
	c.sample(time.Now())
	c.done.Add(1)
	go func() {
		defer c.done.Done()
		t := time.NewTicker(costTick)
		defer t.Stop()
		for {
			select {
			case <-c.stop:
				return
			case now := <-t.C:
				c.sample(now)
			}
		}
	}()
}

// close stops the sampler and waits for it.
func (c *costs) close() {
	close(c.stop)
	c.done.Wait()
}

// table is the page's requests table for the last hour.
func (c *costs) table() *webui.Costs {
	now := time.Now()
	cps := c.checkpoints()
	out := &webui.Costs{Prices: c.prices.String()}
	for i, s := range c.stores {
		d := s.win.Since(cost.Sample{At: now, Requests: s.meter.Requests(), Checkpoints: cps})
		if i == 0 {
			out.WindowSeconds, out.Checkpoints = d.Elapsed.Seconds(), d.Checkpoints
		}
		var state int64
		if s.name == storeCheckpoint {
			state = c.stateBytes()
		}
		est := c.prices.Monthly(d.Requests, d.Elapsed, state)
		sc := webui.StoreCosts{Store: s.name, Measured: s.meter.RequestsMeasured(), Throttled: d.Requests.TotalThrottled(),
			StateBytes: state, StorageDollarsPerMonth: est.Storage, DollarsPerMonth: est.Total()}
		for k := range cost.NumKinds {
			kc := webui.KindCosts{Kind: k.String(), Requests: d.Requests.Requests[k], PerSecond: d.PerSecond(k),
				PerCheckpoint: d.PerCheckpoint(k), DollarsPerMonth: est.Requests[k]}
			if state > 0 {
				kc.PerHourPerGiB = kc.PerSecond * 3600 / (float64(state) / cost.GB)
			}
			sc.Kinds = append(sc.Kinds, kc)
		}
		out.Stores = append(out.Stores, sc)
		out.DollarsPerMonth += est.Total()
	}
	return out
}

// Requests are the requests the node's object stores were sent since it
// opened, every store together (the checkpoint store, and the changelog's
// when it has one): on S3 every HTTP attempt by kind; on other stores the
// calls, one request each. Measured says whether every store counted them
// on the wire.
func (n *Host) Requests() (c cost.Counts, measured bool) {
	measured = true
	for _, s := range n.costs.stores {
		c = c.Add(s.meter.Requests())
		measured = measured && s.meter.RequestsMeasured()
	}
	return c, measured
}
