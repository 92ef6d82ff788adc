// Package metered counts the calls a tiered.Store serves, the ones that
// failed, and the bytes that went up and down, so that the daemon can
// export them: object-store providers bill and throttle by request, and a
// state store that writes tiny objects or lists too often shows it here
// first (SlateDB #192, #1416; RisingWave #22590).
//
// The counts are of Store calls: an S3 Put of a large object is one call
// here and several HTTP requests (multipart) on the wire, and the SDK's
// retries are not counted. Requests (cost.Source) are the HTTP requests
// when the store underneath counts them (tiered/s3store), else the calls
// mapped to the request kinds they would be on S3.
package metered
