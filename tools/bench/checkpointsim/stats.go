package checkpointsim

// CheckpointStats are what Flink's web UI shows of a checkpoint; times are
// simulated milliseconds except Sync and Async, which the daemon measured
// (real time).
type CheckpointStats struct {
	ID uint64 `json:"id"`
	// TriggerMs is when the coordinator triggered it.
	TriggerMs float64 `json:"trigger_ms"`
	// DurationMs is end to end: trigger to the last acknowledgement.
	DurationMs float64 `json:"duration_ms"`
	// AlignmentMs and StartDelayMs are the largest over the tasks: first
	// to last barrier, and trigger to first barrier.
	AlignmentMs  float64 `json:"alignment_ms"`
	StartDelayMs float64 `json:"start_delay_ms"`
	// SyncMs and AsyncMs are the daemon's, largest over the tasks.
	SyncMs  float64 `json:"sync_ms"`
	AsyncMs float64 `json:"async_ms"`
	// CheckpointedSize and FullSize are the daemon's (bytes).
	CheckpointedSize int64 `json:"checkpointed_size"`
	FullSize         int64 `json:"full_size"`
	// InFlightRecords and InFlightBytes are the persisted in-flight data
	// (channel state) the tasks wrote; DaemonInFlightBytes is what the
	// daemon stored for it.
	InFlightRecords     int64 `json:"in_flight_records"`
	InFlightBytes       int64 `json:"in_flight_bytes"`
	DaemonInFlightBytes int64 `json:"daemon_in_flight_bytes"`
	// Unaligned: at least one task snapshotted unaligned (UnalignedTasks
	// of them).
	Unaligned      bool `json:"unaligned"`
	UnalignedTasks int  `json:"unaligned_tasks"`
	// BacklogRecords is the records in the job's channels at the trigger.
	BacklogRecords int64 `json:"backlog_records"`
	// Daemon is what the daemon recorded of the tasks' reports.
	Daemon DaemonStats `json:"daemon"`
}

// DaemonStats are the statistics the daemon keeps of a checkpoint from
// what the tasks reported with their snapshots (CheckpointInfo).
type DaemonStats struct {
	Unaligned    bool    `json:"unaligned"`
	AlignmentMs  float64 `json:"alignment_ms"`
	StartDelayMs float64 `json:"start_delay_ms"`
}
