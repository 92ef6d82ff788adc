package cost

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// HoursPerMonth is the month Monthly extrapolates to: 730 hours, the
// month AWS's price pages use (8,760 hours a year / 12).
const HoursPerMonth = 730

// GB is the unit of storage prices, taken as 2^30 bytes (a provider that
// means 10^9 bills 7.4% more than the estimate says).
const GB = 1 << 30

// Prices are what a provider charges, in dollars.
type Prices struct {
	// PerThousand is the price of 1,000 requests of each kind.
	PerThousand [NumKinds]float64
	// StorageGBMonth is the price of storing one GB (GB bytes) for a
	// month.
	StorageGBMonth float64
}

// S3Standard are AWS's list prices for S3 Standard in us-east-1
// (docs/performance.md cites the page): PUT, COPY, POST and LIST $0.005
// per 1,000; GET and all other requests (HEAD) $0.0004 per 1,000; DELETE
// and CANCEL free; storage $0.023 per GB-month (the first 50 TB).
var S3Standard = Prices{
	PerThousand:    [NumKinds]float64{Put: 0.005, Get: 0.0004, List: 0.005, Delete: 0, Head: 0.0004},
	StorageGBMonth: 0.023,
}

// storageKey is the ParsePrices key of StorageGBMonth.
const storageKey = "storage"

// ParsePrices reads prices in the form "put=0.005,get=0.0004,storage=0.023":
// dollars per 1,000 requests of a kind (put, get, list, delete, head), or
// per GB-month of storage. Keys not given keep base's price. An empty s is
// base.
func ParsePrices(s string, base Prices) (Prices, error) {
	p := base
	s = strings.TrimSpace(s)
	if s == "" {
		return p, nil
	}
	var errs []error
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(f), "=")
		k = strings.ToLower(strings.TrimSpace(k))
		if !ok || k == "" {
			errs = append(errs, fmt.Errorf("%q is not key=dollars", f))
			continue
		}
		if seen[k] {
			errs = append(errs, fmt.Errorf("%s is given twice", k))
			continue
		}
		seen[k] = true
		x, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil || x < 0 || math.IsInf(x, 0) || math.IsNaN(x) {
			errs = append(errs, fmt.Errorf("%s=%q is not a price in dollars (a number, 0 or more)", k, v))
			continue
		}
		if k == storageKey {
			p.StorageGBMonth = x
			continue
		}
		kind, err := ParseKind(k)
		if err != nil {
			errs = append(errs, fmt.Errorf("unknown key %q (put, get, list, delete, head per 1,000 requests; storage per GB-month)", k))
			continue
		}
		p.PerThousand[kind] = x
	}
	if len(errs) > 0 {
		return base, fmt.Errorf("cost: prices %q: %w", s, errors.Join(errs...))
	}
	return p, nil
}

// Validate reports a price that is negative or not a number.
func (p Prices) Validate() error {
	var errs []error
	for k, v := range p.PerThousand {
		if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
			errs = append(errs, fmt.Errorf("cost: price of 1,000 %s requests is %v; give 0 or more dollars", Kind(k), v))
		}
	}
	if v := p.StorageGBMonth; v < 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		errs = append(errs, fmt.Errorf("cost: storage price is %v per GB-month; give 0 or more dollars", v))
	}
	return errors.Join(errs...)
}

// String is p in ParsePrices's form.
func (p Prices) String() string {
	var b strings.Builder
	for k, v := range p.PerThousand {
		fmt.Fprintf(&b, "%s=%s,", Kind(k), strconv.FormatFloat(v, 'g', -1, 64))
	}
	fmt.Fprintf(&b, "%s=%s", storageKey, strconv.FormatFloat(p.StorageGBMonth, 'g', -1, 64))
	return b.String()
}

// Estimate is a month's bill, in dollars.
type Estimate struct {
	// Requests is the price of a month of requests of each kind.
	Requests [NumKinds]float64
	// Storage is the price of a month of storage.
	Storage float64
}

// RequestTotal is the price of a month of requests of every kind.
func (e Estimate) RequestTotal() float64 {
	var t float64
	for _, v := range e.Requests {
		t += v
	}
	return t
}

// Total is requests and storage.
func (e Estimate) Total() float64 { return e.RequestTotal() + e.Storage }

// Monthly is the month's bill of sending requests at the rate c was
// counted over elapsed, and of storing storedBytes all month. With elapsed
// <= 0 the requests are priced as they are (no rate to extrapolate).
func (p Prices) Monthly(c Counts, elapsed time.Duration, storedBytes int64) Estimate {
	scale := 1.0
	if elapsed > 0 {
		scale = float64(HoursPerMonth*time.Hour) / float64(elapsed)
	}
	var e Estimate
	for k := range NumKinds {
		e.Requests[k] = float64(c.Requests[k]) * scale * p.PerThousand[k] / 1000
	}
	e.Storage = float64(max(storedBytes, 0)) / GB * p.StorageGBMonth
	return e
}
