// Package storeurl opens a tiered.Store from a URL, the form the daemon and
// the CLI take checkpoint storage in:
//
//	file:///var/lib/stated/checkpoints   a local directory (localfs)
//	/var/lib/stated/checkpoints          the same, without the scheme
//	s3://bucket/some/prefix              an S3 bucket, rooted at the prefix
//	mem://                               a new, empty in-memory store (tests)
//
// S3 settings come, in this order, from Options, from the URL's query
// (?endpoint=http://127.0.0.1:7070&region=us-east-1&path-style=true), and
// from the environment (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, AWS_REGION,
// AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN); without static credentials the SDK's default chain
// applies. Secrets are never taken from the URL, which ends up in logs.
// Path-style addressing is the default when an endpoint is set (what
// S3-compatible servers want), virtual-host style otherwise (AWS).
//
// With Options.CacheDir set, the store is wrapped in the tiered cache
// (tiered/cache) bounded by Options.CacheBytes; Tier does the same for a
// store opened otherwise. Names Options.Uncached accepts go around the
// cache; the daemon keeps the catalog's metadata out of it
// (catalog.IsMetadata).
package storeurl
