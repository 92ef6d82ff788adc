// Package cost counts object-store requests by billing kind and prices
// them: what a provider such as S3 bills (per request and per GB-month)
// and throttles (per second and prefix).
//
// # Kinds
//
// Providers bill requests in classes, not per API call. Kind names the
// five classes stated reports: PUT (PUT, COPY, POST and the parts of a
// multipart upload), GET, LIST, DELETE and HEAD. S3Kind maps an S3 API
// operation to its kind; OpKind maps a tiered.Op for stores whose HTTP
// requests are not counted (a local directory bills nothing; the
// estimate there says what the same calls would cost on S3, one request
// per call).
//
// # Counting
//
// A Counter counts requests as they are sent: tiered/s3store counts every
// HTTP attempt with an SDK middleware, retries and multipart parts
// included, and the answers that were throttling (503 SlowDown, 429,
// RequestLimitExceeded, ...). A store that counts its own requests
// implements Source; tiered/metered answers Requests through it, or by
// mapping its call counts with OpKind.
//
// # Pricing
//
// Prices hold a price per 1,000 requests of each kind and per GB-month
// of storage; S3Standard are AWS's published list prices for S3 Standard
// in us-east-1 (docs/performance.md cites the page and the date).
// ParsePrices reads the --s3-prices flag's "put=0.005,get=0.0004" form.
// Monthly extrapolates counts over an elapsed time to a month (730
// hours, as AWS prices a month) and adds the storage.
//
// A Window keeps samples of counts (and of completed checkpoints) for the
// last hour, so that a page can show the rate now rather than since the
// start.
package cost
