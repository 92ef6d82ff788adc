package cost

import (
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/statedhq/stated/tiered"
)

// Kind is a billing class of object-store requests.
type Kind uint8

// The kinds, in the order reports list them.
const (
	// Put is PUT, COPY and POST: PutObject, CopyObject, and the create,
	// part uploads and completion of a multipart upload.
	Put Kind = iota
	// Get is GetObject (whole or ranged).
	Get
	// List is ListObjectsV2 and the listings of multipart uploads and
	// parts.
	List
	// Delete is DeleteObject, DeleteObjects (a POST that S3 bills as a
	// delete) and AbortMultipartUpload (a "CANCEL").
	Delete
	// Head is HeadObject and HeadBucket.
	Head
	// NumKinds is the number of kinds.
	NumKinds
)

var kindNames = [NumKinds]string{"put", "get", "list", "delete", "head"}

// String is the kind's name in metrics labels and flags ("put").
func (k Kind) String() string {
	if k < NumKinds {
		return kindNames[k]
	}
	return "kind?"
}

// ParseKind is the kind named s (case-insensitive).
func ParseKind(s string) (Kind, error) {
	for k, n := range kindNames {
		if strings.EqualFold(s, n) {
			return Kind(k), nil
		}
	}
	return 0, fmt.Errorf("cost: unknown request kind %q (put, get, list, delete, head)", s)
}

// OpKind is the kind of request a tiered.Op makes on S3 (one per call:
// a multipart Put or a DeleteBatch of more than 1,000 names makes more).
func OpKind(op tiered.Op) Kind {
	switch op {
	case tiered.OpGet, tiered.OpGetRange:
		return Get
	case tiered.OpStat:
		return Head
	case tiered.OpList:
		return List
	case tiered.OpDelete, tiered.OpDeleteBatch:
		return Delete
	}
	return Put
}

// S3Kind is the kind of an S3 API operation, by the SDK's operation name
// ("PutObject"). Operations stated does not call count as Put, the
// dearest class, so that an estimate errs high.
func S3Kind(operation string) Kind {
	switch operation {
	case "GetObject", "GetObjectAttributes":
		return Get
	case "HeadObject", "HeadBucket":
		return Head
	case "ListObjectsV2", "ListObjects", "ListParts", "ListMultipartUploads", "ListObjectVersions":
		return List
	case "DeleteObject", "DeleteObjects", "AbortMultipartUpload":
		return Delete
	}
	return Put
}

// Counts are request counts by kind.
type Counts struct {
	// Requests are the requests sent, every attempt (retries included).
	Requests [NumKinds]uint64
	// Retries are the requests of Requests that repeated a failed attempt.
	Retries [NumKinds]uint64
	// Throttled are the answers that asked to slow down (503 SlowDown,
	// 429, RequestLimitExceeded, Throttling, ...); each was retried while
	// the request's attempts lasted.
	Throttled [NumKinds]uint64
}

// Total is the number of requests of every kind.
func (c Counts) Total() uint64 {
	var n uint64
	for _, v := range c.Requests {
		n += v
	}
	return n
}

// TotalThrottled is the number of throttled answers of every kind.
func (c Counts) TotalThrottled() uint64 {
	var n uint64
	for _, v := range c.Throttled {
		n += v
	}
	return n
}

// Sub is c minus an earlier snapshot old of the same counter.
func (c Counts) Sub(old Counts) Counts {
	for k := range NumKinds {
		c.Requests[k] -= old.Requests[k]
		c.Retries[k] -= old.Retries[k]
		c.Throttled[k] -= old.Throttled[k]
	}
	return c
}

// Add is c plus o (two stores' counts together).
func (c Counts) Add(o Counts) Counts {
	for k := range NumKinds {
		c.Requests[k] += o.Requests[k]
		c.Retries[k] += o.Retries[k]
		c.Throttled[k] += o.Throttled[k]
	}
	return c
}

// Counter counts requests; it is safe for concurrent use and its zero
// value is ready.
type Counter struct {
	requests, retries, throttled [NumKinds]atomic.Uint64
}

// Request counts one request of kind k sent; retry says it repeats a
// failed attempt.
func (c *Counter) Request(k Kind, retry bool) {
	if k >= NumKinds {
		k = Put
	}
	c.requests[k].Add(1)
	if retry {
		c.retries[k].Add(1)
	}
}

// Throttle counts one answer to a request of kind k that asked to slow
// down.
func (c *Counter) Throttle(k Kind) {
	if k >= NumKinds {
		k = Put
	}
	c.throttled[k].Add(1)
}

// Counts returns the counts now.
func (c *Counter) Counts() Counts {
	var out Counts
	for k := range NumKinds {
		out.Requests[k] = c.requests[k].Load()
		out.Retries[k] = c.retries[k].Load()
		out.Throttled[k] = c.throttled[k].Load()
	}
	return out
}

// Source is a store that counts the requests it sends (tiered/s3store,
// and tiered/metered over any store).
type Source interface {
	// Requests returns the counts since the store was opened.
	Requests() Counts
}

// SourceOf is the Source s is, or wraps (seen through tiered.Unwrapper).
func SourceOf(s tiered.Store) (Source, bool) {
	for s != nil {
		if src, ok := s.(Source); ok {
			return src, true
		}
		u, ok := s.(tiered.Unwrapper)
		if !ok {
			return nil, false
		}
		s = u.Unwrap()
	}
	return nil, false
}
