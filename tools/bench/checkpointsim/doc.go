// Package checkpointsim is "stated bench checkpoint-sim": a simulated
// streaming job under back-pressure whose checkpoints go through a real
// stated daemon, to show what aligned and unaligned checkpoints, the
// aligned-checkpoint timeout and buffer debloating do to checkpoint
// duration and size.
//
// # The job
//
// source -> keyBy -> window aggregate -> keyBy -> sink, each at
// Options.Parallelism. Sources produce records at Options.SourceRate; a
// record's key is a pure function of (seed, source, sequence number) and
// its event time is its sequence number, so a restored source replays
// exactly the records it produced before. Windows count a key's records
// per tumbling event-time window in real keyed state (an aggregate per
// (key, window), a timer at the window's end) and fire at the watermark:
// the smallest, over their input channels, of the largest timestamp seen,
// which the channels' FIFO order makes exact. Sinks are transactional:
// their output since the last checkpoint is pre-committed at a snapshot
// and committed when the checkpoint completes, so the committed output of
// a run that failed and restored equals that of a run that did not.
//
// # Simulated time
//
// It is a deterministic discrete-event simulation: a queue of events in
// simulated microseconds, nothing depends on the wall clock or on
// goroutine scheduling, so durations, alignment and start delay are
// reproducible and a run of a minute of simulated time takes about a
// second. A channel is two bounded FIFO queues of records, the producer's
// subpartition and the consumer's input channel (Options.Buffers x
// Options.RecordsPerBuffer records each); records move to the input side
// as soon as it has room (credit-based flow control, no network delay),
// and a full subpartition blocks its producer. A task processes one
// record at a time at its per-record cost; the sink's cost exceeds what
// the sources produce, so the backlog grows until the buffers are full.
// Only the daemon's sync and async times are real (measured by the daemon).
//
// # Checkpoints
//
// Barriers are injected at the sources every Options.Interval (no earlier
// than the previous checkpoint completed: one at a time, as Flink's
// default). Aligned: a task with several inputs blocks each input whose
// barrier arrived until all arrived; start delay is trigger to first
// barrier, alignment first to last. Unaligned: barriers overtake every
// queue at once, each task snapshots at the trigger, and the records
// overtaken, in its input channels and in its output subpartitions, are
// written as its channel state before its snapshot. Aligned with timeout:
// aligned, but at Options.Timeout after the trigger every task that has
// not snapshotted switches to unaligned, persisting per input the records
// before the barrier still in flight. Debloating sets every channel's
// capacity every 50 ms to its consumer's measured throughput times
// Options.DebloatTarget. A checkpoint completes (CompleteCheckpoint) once
// every task has acknowledged it.
//
// # Caveats
//
// Persisting channel state and uploading snapshots takes no simulated
// time, and the network none either: an unaligned checkpoint's duration
// is the acknowledgement latency. Records are small (about 10 bytes
// encoded), so sizes are small too; the shapes, not the magnitudes, are
// the point.
package checkpointsim
