// Package s3test gives tests an S3 server to talk to: the one named by
// STATED_TEST_S3_ENDPOINT (a real server, e.g. versitygw started by
// scripts/s3-server.sh in CI), or an in-process gofakes3 server.
//
// With a real server every caller gets its own fresh prefix in
// STATED_TEST_S3_BUCKET, emptied when the test ends, so runs can share a
// bucket. The credentials come from AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY (the SDK's default chain when unset).
package s3test
