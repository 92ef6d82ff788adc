// Package latency is the fixed-bucket latency histogram the daemon's and
// the cluster's metrics record into: atomics only, so that recording on a
// hot path takes no lock, exported to Prometheus at scrape time.
package latency
