// Package bench is "stated bench": it measures stated the way a user of it
// sees it, through the Go client over the daemon's real socket.
//
// A run (Runner.Run) takes a named workload (package workload) through
// phases, each timed: load (write every key), checkpoint 1, a warm-up, the
// measured run (throughput, and latency p50/p99/p99.9 per operation kind
// from issue to answer, in bounded histograms: package hist), checkpoint 2
// (synchronous and asynchronous parts, completion, checkpointed and full
// bytes), a restore of every task from it and a rescale to another
// parallelism. It does so for every configuration of a matrix (backends x
// changelog), each on a fresh embedded daemon (node.Open on a temporary
// data dir with the node's defaults, except a heap snapshot cap large
// enough for benchmark state) or on an external daemon, and repeats the
// matrix interleaved so that a drift of the machine touches every
// configuration alike. A baseline runs the same load and operations on raw
// in-process Pebble, configured as the lsm backend configures it.
//
// Figures are named phase.figure or run.kind.figure with a unit suffix
// (FigureUnit); a Report holds each run's figures, min/median/max per
// configuration and the ratios to the baseline, with the parameters, the
// machine and the git revision. Compare reads two reports; Plot draws one;
// Instances measures what idle instances cost.
//
// Operations per task are bounded by InFlight (issued, not answered) and
// latency histograms are fixed-size, so memory does not grow with the
// run's length; inserted keys are remembered up to a bound (package
// workload). Every goroutine a phase starts ends before the phase returns.
package bench
