// Package fault is a tiered.Store decorator that injects failures, for
// tests of everything above the store: checkpoints, restores, the tiered
// cache, garbage collection.
//
// Faults (each with its own probability, all drawn from one seeded
// generator, so a run with a sequential caller is reproducible from its
// seed):
//   - errors before an operation reaches the store (ErrorRate);
//   - lost replies: the operation took effect but the caller gets an error
//     (LostReplyRate), which is what makes retries and idempotency matter;
//   - added latency (Latency, LatencyJitter), honouring ctx;
//   - truncated reads: a reader from Get or GetRange stops at a random point
//     (TruncateRate), with an error, or silently with io.EOF as a broken
//     proxy would (SilentTruncation) so checksums above must catch it;
//   - writes that fail part way: the reader Put consumes breaks at a random
//     point (PartialWriteRate);
//   - a byte budget: after FailAfterBytes bytes have gone through the
//     wrapper, every read and write fails (a dead disk or network).
//
// Every injected error wraps ErrInjected. Concurrent callers draw from the
// generator in scheduling order, so only the fault rates, not the exact
// sequence, carry over between runs of concurrent tests.
package fault
