package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cache"
	"github.com/statedhq/stated/tiered/localfs"
	"github.com/statedhq/stated/tiered/memstore"
	"github.com/statedhq/stated/tiered/s3store"
)

// DefaultCacheBytes bounds the cache when CacheDir is set and CacheBytes
// is not.
const DefaultCacheBytes = 1 << 30

// Addressing styles for Options.Addressing.
const (
	AddressingAuto    = ""        // path-style with an endpoint, else virtual-host
	AddressingPath    = "path"    // http://host/bucket/key
	AddressingVirtual = "virtual" // http://bucket.host/key
)

// Options complete a URL. Empty fields fall back to the URL's query, then
// to the environment.
type Options struct {
	// Endpoint is the S3 service URL.
	Endpoint string
	// Region is the S3 signing region.
	Region string
	// AccessKeyID and SecretAccessKey are static S3 credentials.
	AccessKeyID, SecretAccessKey string
	// Addressing is AddressingAuto (default), AddressingPath or
	// AddressingVirtual.
	Addressing string
	// S3 carries further S3 tuning (part size, concurrency, timeouts,
	// retries); its bucket, prefix, endpoint, region, credentials and
	// addressing are set from the URL and the fields above.
	S3 s3store.Options
	// CacheDir, when set, puts a local cache in that directory in front of
	// the store.
	CacheDir string
	// CacheBytes bounds the cache. Default DefaultCacheBytes.
	CacheBytes int64
	// Uncached, when set (and CacheDir is), picks the objects that bypass
	// the cache: their puts, gets and stats go straight to the store and
	// they never get a local copy. Use it for objects that are rewritten
	// under one name or may be written by another process, whose cached
	// copy could be stale (catalog.IsMetadata). Default nil: everything is
	// cached.
	Uncached func(name string) bool
	// Wrap, when set, wraps the store the URL names before the cache goes
	// in front of it: what it sees are the calls that reach the store
	// itself (e.g. metered.New, to count them).
	Wrap func(tiered.Store) tiered.Store
}

// Location is a parsed store URL.
type Location struct {
	// Scheme is "file", "s3" or "mem".
	Scheme string
	// Path is the directory of a file URL.
	Path string
	// Bucket and Prefix locate an S3 store.
	Bucket, Prefix string
	// Query holds the URL's S3 settings.
	Query url.Values
}

// Parse parses a store URL without opening anything.
func Parse(rawURL string) (Location, error) {
	if rawURL == "" {
		return Location{}, errors.New("storeurl: empty store URL")
	}
	if !strings.Contains(rawURL, "://") && !strings.HasPrefix(rawURL, "file:") {
		// A plain path.
		return Location{Scheme: "file", Path: rawURL}, nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return Location{}, fmt.Errorf("storeurl: %w", err)
	}
	loc := Location{Scheme: u.Scheme, Query: u.Query()}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return Location{}, fmt.Errorf("storeurl: %q: file URLs take no host (use file:///absolute/path or file:relative/path)", rawURL)
		}
		loc.Path = u.Path
		if u.Opaque != "" {
			loc.Path = u.Opaque
		}
		if loc.Path == "" {
			return Location{}, fmt.Errorf("storeurl: %q names no directory", rawURL)
		}
		if len(loc.Query) > 0 {
			return Location{}, fmt.Errorf("storeurl: %q: file URLs take no query", rawURL)
		}
	case "s3":
		if u.Host == "" {
			return Location{}, fmt.Errorf("storeurl: %q names no bucket (s3://bucket/prefix)", rawURL)
		}
		if u.User != nil {
			return Location{}, fmt.Errorf("storeurl: %q: credentials do not belong in the URL; use flags or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY", u.Redacted())
		}
		loc.Bucket = u.Host
		loc.Prefix = strings.Trim(u.Path, "/")
		if loc.Prefix != "" {
			if err := tiered.ValidateName(loc.Prefix); err != nil {
				return Location{}, fmt.Errorf("storeurl: %q: prefix: %w", rawURL, err)
			}
		}
		for k := range loc.Query {
			switch k {
			case "endpoint", "region", "path-style":
			default:
				return Location{}, fmt.Errorf("storeurl: %q: unknown parameter %q (known: endpoint, region, path-style)", u.Redacted(), k)
			}
		}
	case "mem":
	default:
		return Location{}, fmt.Errorf("storeurl: %q: unknown scheme %q (file, s3, mem)", rawURL, u.Scheme)
	}
	return loc, nil
}

func first(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// S3Options resolves the S3 options of an s3 location.
func (loc Location) S3Options(opts Options) (s3store.Options, error) {
	o := opts.S3
	o.Bucket, o.Prefix = loc.Bucket, loc.Prefix
	o.Endpoint = first(opts.Endpoint, loc.Query.Get("endpoint"), os.Getenv("AWS_ENDPOINT_URL_S3"), os.Getenv("AWS_ENDPOINT_URL"))
	o.Region = first(opts.Region, loc.Query.Get("region"), os.Getenv("AWS_REGION"), os.Getenv("AWS_DEFAULT_REGION"))
	o.AccessKeyID, o.SecretAccessKey, o.SessionToken = opts.AccessKeyID, opts.SecretAccessKey, ""
	if o.AccessKeyID == "" && o.SecretAccessKey == "" {
		o.AccessKeyID, o.SecretAccessKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		o.SessionToken = os.Getenv("AWS_SESSION_TOKEN")
	}
	style := opts.Addressing
	if style == AddressingAuto {
		if ps := loc.Query.Get("path-style"); ps != "" {
			b, err := strconv.ParseBool(ps)
			if err != nil {
				return o, fmt.Errorf("storeurl: path-style=%q is not a boolean", ps)
			}
			style = AddressingVirtual
			if b {
				style = AddressingPath
			}
		}
	}
	switch style {
	case AddressingAuto:
		o.PathStyle = o.Endpoint != ""
	case AddressingPath:
		o.PathStyle = true
	case AddressingVirtual:
		o.PathStyle = false
	default:
		return o, fmt.Errorf("storeurl: addressing %q is not path or virtual", style)
	}
	return o, nil
}

// Open opens the store rawURL names.
func Open(ctx context.Context, rawURL string, opts Options) (tiered.Store, error) {
	loc, err := Parse(rawURL)
	if err != nil {
		return nil, err
	}
	var s tiered.Store
	switch loc.Scheme {
	case "file":
		s, err = localfs.Open(loc.Path)
	case "mem":
		s = memstore.New()
	case "s3":
		var so s3store.Options
		if so, err = loc.S3Options(opts); err == nil {
			s, err = s3store.Open(ctx, so)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("storeurl: open %s: %w", redact(rawURL), err)
	}
	if opts.Wrap != nil {
		s = opts.Wrap(s)
	}
	t, err := Tier(s, opts)
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("storeurl: open %s: %w", redact(rawURL), err)
	}
	return t, nil
}

// Tier puts the cache opts.CacheDir names (bounded by opts.CacheBytes,
// bypassed by the names opts.Uncached accepts) in front of remote, as Open
// does; without CacheDir it returns remote itself. The result's Close
// closes remote; on error remote is left open. The cache is a *cache.Store,
// or with Uncached a store that embeds one (its Stats and Cached methods
// are promoted).
func Tier(remote tiered.Store, opts Options) (tiered.Store, error) {
	if opts.CacheDir == "" {
		return remote, nil
	}
	if opts.CacheBytes == 0 {
		opts.CacheBytes = DefaultCacheBytes
	}
	c, err := cache.New(remote, cache.Options{Dir: opts.CacheDir, MaxBytes: opts.CacheBytes})
	if err != nil {
		return nil, err
	}
	if opts.Uncached == nil {
		return c, nil
	}
	return &partialCache{Store: c, remote: remote, uncached: opts.Uncached}, nil
}

func redact(raw string) string {
	if u, err := url.Parse(raw); err == nil {
		return u.Redacted()
	}
	return raw
}
