// Package s3store is the tiered.Store of an S3 bucket (AWS S3 or any
// S3-compatible service: versitygw, MinIO, Ceph RGW), built on
// aws-sdk-go-v2.
//
// How each operation maps to S3:
//   - Put of up to MultipartThreshold bytes is one PutObject of a buffered
//     body (seekable, so the SDK can sign and retry it over plain HTTP).
//     Larger objects are multipart uploads: parts of PartSize bytes, up to
//     Concurrency in flight; any failure aborts the upload, so no
//     incomplete upload is left to bill for (a crash may still leave one:
//     configure the bucket's AbortIncompleteMultipartUpload lifecycle rule).
//   - PutIfAbsent sends If-None-Match: * on PutObject or on
//     CompleteMultipartUpload; a 412 is tiered.ErrExists. Servers that
//     ignore the header on multipart completion (gofakes3) cannot give
//     exactly one winner there.
//   - GetRange is a ranged GetObject. A read that breaks mid-body resumes
//     with a ranged GET from where it stopped, pinned to the first reply's
//     ETag, so a resumed read never mixes two versions of an object.
//   - List is ListObjectsV2 with StartAfter (no continuation tokens, so a
//     page boundary is just a name). DeleteBatch is DeleteObjects in
//     batches of up to 1000 keys, DeleteConcurrency batches in flight.
//   - Every request has a timeout (RequestTimeout, over all its attempts;
//     for Get it covers reading the body) and goes through the SDK's
//     standard retryer (exponential backoff with jitter): MaxAttempts
//     attempts, or ThrottleMaxAttempts while the answers are throttling
//     (503 SlowDown, 429, RequestLimitExceeded; IsThrottle), which must
//     never surface as a failure while the store only asks to slow down.
//
// # Requests and throttling
//
// An SDK middleware right after the retry loop sees every HTTP attempt: it
// counts it by billing kind (cost.S3Kind) into Options.Requests, retries,
// multipart parts and the bucket check included, and the throttling
// answers; Store.Requests returns the counts (cost.Source). With
// RequestsPerSecond set, the same middleware waits for a token of a
// client-side token bucket (golang.org/x/time/rate) before each attempt.
// s3test.Throttler is a proxy that answers SlowDown, for tests.
//
// Request checksums are sent only where S3 requires them (DeleteObjects):
// many S3-compatible servers reject the SDK's default trailing checksums.
// Integrity in transit comes from the SigV4 payload hash, and stated
// checksums every file it stores anyway.
package s3store
