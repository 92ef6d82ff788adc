package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/cost"
)

// S3 limits the options are checked against.
const (
	MinPartSize    = 5 << 20
	MaxParts       = 10000
	MaxDeleteBatch = 1000
	maxListPage    = 1000
)

// Options configure a Store. Only Bucket is required.
type Options struct {
	// Bucket is the bucket's name. Required.
	Bucket string
	// Prefix, when not empty, roots the store at "Prefix/" in the bucket.
	Prefix string
	// Endpoint is the service URL, e.g. "http://127.0.0.1:7070". Default:
	// the SDK's resolution (AWS_ENDPOINT_URL, else AWS S3 for the region).
	Endpoint string
	// Region is the signing region. Default: the SDK's default chain
	// (AWS_REGION, shared config), else "us-east-1".
	Region string
	// AccessKeyID and SecretAccessKey (and optional SessionToken) are static
	// credentials. Default (both empty): the SDK's default credential chain
	// (environment, shared files, instance roles).
	AccessKeyID, SecretAccessKey, SessionToken string
	// PathStyle addresses the bucket in the path (http://host/bucket/key),
	// which most S3-compatible servers need. Default false (virtual-host).
	PathStyle bool
	// PartSize is the multipart part size. Default 16 MiB, at least 5 MiB
	// (S3's minimum). It grows for objects that would need more than 10000
	// parts.
	PartSize int64
	// MultipartThreshold is the largest object uploaded with one PutObject.
	// Default PartSize; at least PartSize.
	MultipartThreshold int64
	// Concurrency is the number of parts of one Put in flight (each holds a
	// PartSize buffer). Default 4.
	Concurrency int
	// DeleteConcurrency is the number of DeleteObjects batches in flight.
	// Default 4.
	DeleteConcurrency int
	// RequestTimeout bounds each request, including reading a GET's body.
	// Default 2 minutes.
	RequestTimeout time.Duration
	// MaxAttempts is the number of attempts of each request (the SDK's
	// standard retryer, exponential backoff with jitter) that failed with
	// an error other than throttling. Default 5.
	MaxAttempts int
	// ThrottleMaxAttempts is the number of attempts of a request whose
	// answers ask to slow down (503 SlowDown, 429, RequestLimitExceeded,
	// Throttling): throttling is the store working as designed, so it gets
	// more attempts, each backed off (from 1 s, doubling, with jitter, up
	// to MaxBackoff) rather than surfaced as a failure. The SDK's shared
	// retry quota, which would fail every request at once after about 100
	// throttled retries of the whole client, is off: these per-request
	// budgets bound the retries instead. Default 20 (with MaxBackoff 5 s,
	// about 45 s of backoff on average, at most 90 s); at least
	// MaxAttempts.
	ThrottleMaxAttempts int
	// MaxBackoff caps the retryer's delay between attempts. Default 5 s.
	MaxBackoff time.Duration
	// RequestsPerSecond, when positive, paces the store's HTTP requests
	// (every attempt) with a token bucket: a client-side limit below the
	// provider's, so that a burst of checkpoints queues here instead of
	// drawing SlowDown answers. Default 0: no limit.
	RequestsPerSecond float64
	// Burst is the token bucket's size: requests that may go at once after
	// a quiet spell. Default: RequestsPerSecond rounded up (at least 1).
	Burst int
	// Requests, when set, counts the store's HTTP requests (see
	// Store.Requests); several stores may share one. Default: a counter of
	// the store's own.
	Requests *cost.Counter
	// HTTPClient, when set, sends the requests. Default: the SDK's client.
	HTTPClient *http.Client
	// SkipBucketCheck skips the HeadBucket request Open makes to report a
	// missing bucket or refused credentials at once.
	SkipBucketCheck bool
	// Logger receives the SDK's messages, with LogMode selecting the
	// optional ones (e.g. aws.LogRetries). Default: the SDK's (standard
	// error), no optional messages.
	Logger  logging.Logger
	LogMode aws.ClientLogMode
}

// EnsureDefaults fills zero fields with their defaults.
func (o *Options) EnsureDefaults() {
	if o.PartSize == 0 {
		o.PartSize = 16 << 20
	}
	if o.MultipartThreshold == 0 {
		o.MultipartThreshold = o.PartSize
	}
	if o.Concurrency == 0 {
		o.Concurrency = 4
	}
	if o.DeleteConcurrency == 0 {
		o.DeleteConcurrency = 4
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = 2 * time.Minute
	}
	if o.MaxAttempts == 0 {
		o.MaxAttempts = 5
	}
	if o.MaxBackoff == 0 {
		o.MaxBackoff = 5 * time.Second
	}
	if o.ThrottleMaxAttempts == 0 {
		o.ThrottleMaxAttempts = max(20, o.MaxAttempts)
	}
	if o.Burst == 0 && o.RequestsPerSecond > 0 {
		o.Burst = max(1, int(math.Ceil(o.RequestsPerSecond)))
	}
	if o.Requests == nil {
		o.Requests = new(cost.Counter)
	}
}

// Validate reports every problem of o at once. Call EnsureDefaults first.
func (o *Options) Validate() error {
	var errs []error
	if o.Bucket == "" {
		errs = append(errs, errors.New("s3store: no bucket"))
	}
	if o.Prefix != "" {
		if err := tiered.ValidateName(strings.TrimSuffix(o.Prefix, "/")); err != nil {
			errs = append(errs, fmt.Errorf("s3store: prefix: %w", err))
		}
	}
	if o.PartSize < MinPartSize {
		errs = append(errs, fmt.Errorf("s3store: part size %d is below S3's minimum of %d", o.PartSize, MinPartSize))
	}
	if o.MultipartThreshold < o.PartSize {
		errs = append(errs, fmt.Errorf("s3store: multipart threshold %d is below the part size %d", o.MultipartThreshold, o.PartSize))
	}
	if o.Concurrency < 1 || o.DeleteConcurrency < 1 {
		errs = append(errs, fmt.Errorf("s3store: concurrency %d and delete concurrency %d must be at least 1", o.Concurrency, o.DeleteConcurrency))
	}
	if o.RequestTimeout < 0 || o.MaxAttempts < 1 || o.MaxBackoff < 0 {
		errs = append(errs, fmt.Errorf("s3store: request timeout %v, max attempts %d, max backoff %v: must be positive", o.RequestTimeout, o.MaxAttempts, o.MaxBackoff))
	}
	if o.ThrottleMaxAttempts < o.MaxAttempts {
		errs = append(errs, fmt.Errorf("s3store: throttle max attempts %d is below max attempts %d", o.ThrottleMaxAttempts, o.MaxAttempts))
	}
	if o.RequestsPerSecond < 0 || math.IsNaN(o.RequestsPerSecond) || math.IsInf(o.RequestsPerSecond, 0) || o.Burst < 0 {
		errs = append(errs, fmt.Errorf("s3store: request rate %v/s with burst %d: give a rate of 0 (no limit) or more and a burst of 0 or more", o.RequestsPerSecond, o.Burst))
	}
	if (o.AccessKeyID == "") != (o.SecretAccessKey == "") {
		errs = append(errs, errors.New("s3store: give both access key id and secret access key, or neither"))
	}
	return errors.Join(errs...)
}

// Store is an S3-backed tiered.Store: the tiered.Bucket checks in front
// of a driver that makes the S3 requests.
type Store struct {
	*tiered.Bucket
	d *driver
}

type driver struct {
	client *s3.Client
	opts   Options
	prefix string // "" or ends in "/"
}

var _ tiered.Store = (*Store)(nil)

// Open builds the client and, unless SkipBucketCheck, checks the bucket.
func Open(ctx context.Context, opts Options) (*Store, error) {
	opts.EnsureDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	lo := []func(*config.LoadOptions) error{
		config.WithRetryer(func() aws.Retryer { return newRetryer(opts) }),
	}
	if opts.Logger != nil {
		lo = append(lo, config.WithLogger(opts.Logger), config.WithClientLogMode(opts.LogMode))
	}
	if opts.Region != "" {
		lo = append(lo, config.WithRegion(opts.Region))
	}
	if opts.AccessKeyID != "" {
		lo = append(lo, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(opts.AccessKeyID, opts.SecretAccessKey, opts.SessionToken)))
	}
	cfg, err := config.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return nil, fmt.Errorf("s3store: load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
		}
		o.UsePathStyle = opts.PathStyle
		if opts.HTTPClient != nil {
			o.HTTPClient = opts.HTTPClient
		}
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		o.APIOptions = append(o.APIOptions, attemptMiddleware(opts))
	})
	s := &driver{client: client, opts: opts}
	if p := strings.TrimSuffix(opts.Prefix, "/"); p != "" {
		s.prefix = p + "/"
	}
	if !opts.SkipBucketCheck {
		rctx, cancel := context.WithTimeout(ctx, opts.RequestTimeout)
		defer cancel()
		if _, err := client.HeadBucket(rctx, &s3.HeadBucketInput{Bucket: aws.String(opts.Bucket)}); err != nil {
			if h := s.hint(err, true); h != "" {
				return nil, fmt.Errorf("s3store: bucket %q at %s: %s: %w", opts.Bucket, s.where(), h, err)
			}
			return nil, fmt.Errorf("s3store: bucket %q at %s: %w", opts.Bucket, s.where(), err)
		}
	}
	return &Store{Bucket: tiered.New(s), d: s}, nil
}

// Client is the underlying S3 client (for tests and tools).
func (s *Store) Client() *s3.Client { return s.d.client }

// Requests implements cost.Source: the HTTP requests the store sent (every
// attempt, multipart parts and retries included) and the throttling
// answers, by kind. With a shared Options.Requests they are those of every
// store that shares it.
func (s *Store) Requests() cost.Counts { return s.d.opts.Requests.Counts() }

// Options returns the options the store runs with, defaults filled in.
func (s *Store) Options() Options { return s.d.opts }

func (s *driver) where() string {
	if s.opts.Endpoint != "" {
		return s.opts.Endpoint
	}
	return "the default S3 endpoint"
}

func (s *driver) key(name string) string { return s.prefix + name }

func (s *driver) Info() tiered.DriverInfo {
	return tiered.DriverInfo{Name: "s3store", ListPageSize: maxListPage}
}

// Classify implements tiered.Driver: S3's codes and statuses for a missing
// object, a failed precondition and an unsatisfiable range.
func (s *driver) Classify(err error) error {
	code, status := errorCode(err)
	switch {
	case code == "NoSuchKey" || code == "NotFound" || (status == http.StatusNotFound && code != "NoSuchBucket"):
		return tiered.ErrNotFound
	case code == "PreconditionFailed" || status == http.StatusPreconditionFailed:
		return tiered.ErrExists
	case code == "InvalidRange" || status == http.StatusRequestedRangeNotSatisfiable:
		return tiered.ErrInvalidRange
	}
	return nil
}

// wrap names the request and the bucket in an S3 error; the Bucket in
// front adds the sentinel Classify finds.
func (s *driver) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if h := s.hint(err, false); h != "" {
		return fmt.Errorf("%s (bucket %s): %s: %w", op, s.opts.Bucket, h, err)
	}
	return fmt.Errorf("%s (bucket %s): %w", op, s.opts.Bucket, err)
}

func errorCode(err error) (code string, status int) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	return code, status
}

func (s *driver) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.opts.RequestTimeout)
}

// Put implements tiered.Driver: one PutObject up to the multipart
// threshold, a multipart upload above it.
func (s *driver) Put(ctx context.Context, name string, r io.Reader, size int64, ifAbsent bool) error {
	key := s.key(name)
	if size > s.opts.MultipartThreshold {
		if ifAbsent {
			// Do not upload a large object only to be refused at the end.
			if _, err := s.Stat(ctx, name); err == nil {
				return tiered.ErrExists
			} else if s.Classify(err) != tiered.ErrNotFound {
				return err
			}
		}
		return s.putMultipart(ctx, name, key, r, size, ifAbsent)
	}
	buf := make([]byte, size)
	if err := readExactly(r, buf); err != nil {
		return err
	}
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.opts.Bucket),
		Key:           aws.String(key),
		Body:          bytes.NewReader(buf),
		ContentLength: aws.Int64(size),
	}
	if ifAbsent {
		in.IfNoneMatch = aws.String("*")
	}
	for attempt := 0; ; attempt++ {
		rctx, cancel := s.reqCtx(ctx)
		_, err := s.client.PutObject(rctx, in)
		cancel()
		// 409 ConditionalRequestConflict: a concurrent conditional write
		// was in progress; S3 asks to retry, and the retry sees the winner.
		if code, _ := errorCode(err); code == "ConditionalRequestConflict" && attempt < s.opts.MaxAttempts {
			in.Body = bytes.NewReader(buf)
			continue
		}
		return s.wrap("put", err)
	}
}

// readExactly fills buf from r and checks r has nothing more.
func readExactly(r io.Reader, buf []byte) error {
	if n, err := io.ReadFull(r, buf); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return fmt.Errorf("read %d bytes, want %d", n, len(buf))
		}
		return err
	}
	var one [1]byte
	n, err := io.ReadFull(r, one[:])
	if n > 0 {
		return fmt.Errorf("reader has more than the %d bytes announced", len(buf))
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

func (s *driver) putMultipart(ctx context.Context, name, key string, r io.Reader, size int64, ifAbsent bool) (err error) {
	partSize := max(s.opts.PartSize, (size+MaxParts-1)/MaxParts)
	nparts := int((size + partSize - 1) / partSize)
	rctx, cancel := s.reqCtx(ctx)
	created, err := s.client.CreateMultipartUpload(rctx, &s3.CreateMultipartUploadInput{
		Bucket: aws.String(s.opts.Bucket), Key: aws.String(key),
	})
	cancel()
	if err != nil {
		return s.wrap("create multipart upload", err)
	}
	uploadID := created.UploadId
	defer func() {
		if err == nil {
			return
		}
		if aerr := s.abortUpload(context.WithoutCancel(ctx), key, uploadID); aerr != nil {
			err = fmt.Errorf("%w (and aborting upload %s failed: %v)", err, aws.ToString(uploadID), aerr)
		}
	}()

	pctx, stop := context.WithCancel(ctx)
	defer stop()
	parts := make([]types.CompletedPart, nparts)
	sem := make(chan []byte, s.opts.Concurrency)
	for range s.opts.Concurrency {
		sem <- nil // buffers are allocated on first use
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
			stop()
		}
		mu.Unlock()
	}
	for i := range nparts {
		var buf []byte
		select {
		case buf = <-sem:
		case <-pctx.Done():
		}
		if pctx.Err() != nil {
			break
		}
		n := min(partSize, size-int64(i)*partSize)
		if int64(cap(buf)) < n {
			buf = make([]byte, partSize)
		}
		buf = buf[:n]
		if _, rerr := io.ReadFull(r, buf); rerr != nil {
			// Let the parts in flight finish rather than cancel them: a
			// part cancelled client-side may still land on the server
			// after the abort below and bring the upload back.
			mu.Lock()
			if firstErr == nil {
				firstErr = fmt.Errorf("read part %d of %d: %w", i+1, nparts, rerr)
			}
			mu.Unlock()
			sem <- buf
			break
		}
		wg.Go(func() {
			defer func() { sem <- buf }()
			rctx, cancel := s.reqCtx(pctx)
			defer cancel()
			out, err := s.client.UploadPart(rctx, &s3.UploadPartInput{
				Bucket: aws.String(s.opts.Bucket), Key: aws.String(key), UploadId: uploadID,
				PartNumber: aws.Int32(int32(i + 1)), Body: bytes.NewReader(buf), ContentLength: aws.Int64(n),
			})
			if err != nil {
				fail(s.wrap(fmt.Sprintf("upload part %d of %d", i+1, nparts), err))
				return
			}
			parts[i] = types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(int32(i + 1))}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := readExactly(r, nil); err != nil {
		return err
	}
	in := &s3.CompleteMultipartUploadInput{
		Bucket: aws.String(s.opts.Bucket), Key: aws.String(key), UploadId: uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	}
	if ifAbsent {
		in.IfNoneMatch = aws.String("*")
	}
	rctx, cancel = s.reqCtx(ctx)
	_, err = s.client.CompleteMultipartUpload(rctx, in)
	cancel()
	if code, _ := errorCode(err); code == "ConditionalRequestConflict" {
		// A concurrent conditional write raced this one; whoever completed
		// first owns the name.
		return fmt.Errorf("concurrent conditional write: %w", tiered.ErrExists)
	}
	return s.wrap("complete multipart upload", err)
}

// GetRange implements tiered.Driver. S3 reports a range that starts past
// the end itself, so the size is returned only when it is known anyway.
func (s *driver) GetRange(ctx context.Context, name string, offset, length int64) (io.ReadCloser, int64, error) {
	if length == 0 {
		// S3 has no empty range; check existence and bounds with a HEAD.
		info, err := s.Stat(ctx, name)
		if err != nil {
			return nil, 0, err
		}
		return io.NopCloser(bytes.NewReader(nil)), info.Size, nil
	}
	rd := &reader{s: s, ctx: ctx, name: name, key: s.key(name), offset: offset, end: -1, total: -1}
	if length > 0 {
		rd.end = offset + length // exclusive
	}
	err := rd.open()
	if s.Classify(err) == tiered.ErrInvalidRange {
		// S3 refuses a ranged GET of an empty object, and some servers
		// (gofakes3) one that ends past the object's end; both are valid
		// here, so look at the size and clip.
		info, serr := s.Stat(ctx, name)
		switch {
		case serr != nil:
			return nil, 0, serr
		case tiered.CheckRange(offset, length, info.Size) != nil:
			return nil, 0, err
		case offset == info.Size:
			return io.NopCloser(bytes.NewReader(nil)), info.Size, nil
		}
		rd.end = info.Size
		if length > 0 {
			rd.end = min(offset+length, info.Size)
		}
		err = rd.open()
	}
	if err != nil {
		return nil, 0, err
	}
	return rd, rd.total, nil
}

// reader streams an object's body and resumes after a broken connection.
type reader struct {
	s        *driver
	ctx      context.Context
	cancel   context.CancelFunc
	name     string
	key      string
	offset   int64 // next byte to return
	end      int64 // exclusive end of the wanted range; -1: the object's end
	etag     *string
	total    int64 // the object's size from the first response; -1: unknown
	body     io.ReadCloser
	resumes  int
	finished bool
}

func (r *reader) open() error {
	rng := fmt.Sprintf("bytes=%d-", r.offset)
	if r.end >= 0 {
		rng = fmt.Sprintf("bytes=%d-%d", r.offset, r.end-1)
	}
	if r.offset == 0 && r.end < 0 {
		rng = "" // a whole-object GET also works for empty objects
	}
	ctx, cancel := r.s.reqCtx(r.ctx)
	in := &s3.GetObjectInput{Bucket: aws.String(r.s.opts.Bucket), Key: aws.String(r.key), IfMatch: r.etag}
	if rng != "" {
		in.Range = aws.String(rng)
	}
	out, err := r.s.client.GetObject(ctx, in)
	if err != nil {
		cancel()
		if r.etag != nil {
			if code, status := errorCode(err); code == "PreconditionFailed" || status == http.StatusPreconditionFailed {
				return fmt.Errorf("s3store: get %s: the object was replaced while it was read", r.name)
			}
		}
		if c := r.s.Classify(err); c != nil && r.etag != nil {
			// A resumed read does not go back through the Bucket: name
			// the sentinel here.
			return fmt.Errorf("s3store: get %s: %w: %w", r.name, c, err)
		}
		return r.s.wrap("get", err)
	}
	if r.etag == nil {
		r.etag = out.ETag
		r.total = totalSize(out, rng)
	}
	if out.ContentLength != nil {
		// Pin the end to what the server sends (a range past the object's
		// end is cut there), so a resumed read knows how much is left.
		r.end = r.offset + *out.ContentLength
	}
	r.body, r.cancel = out.Body, cancel
	return nil
}

func (r *reader) Read(p []byte) (int, error) {
	if r.finished {
		return 0, io.EOF
	}
	if r.end >= 0 && r.offset >= r.end {
		r.finished = true
		return 0, io.EOF
	}
	for {
		if r.body == nil {
			if err := r.open(); err != nil {
				return 0, err
			}
		}
		n, err := r.body.Read(p)
		r.offset += int64(n)
		if err == nil || n > 0 {
			return n, nil
		}
		if err == io.EOF && (r.end < 0 || r.offset >= r.end) {
			r.finished = true
			return 0, io.EOF
		}
		// The body broke (or ended short): resume with a ranged GET.
		r.closeBody()
		if cerr := r.ctx.Err(); cerr != nil {
			return 0, cerr
		}
		if r.resumes++; r.resumes > r.s.opts.MaxAttempts {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, fmt.Errorf("s3store: get %s: body broke at byte %d %d times: %w", r.name, r.offset, r.resumes, err)
		}
	}
}

func (r *reader) closeBody() {
	if r.body != nil {
		r.body.Close()
		r.body = nil
	}
	if r.cancel != nil {
		r.cancel()
		r.cancel = nil
	}
}

func (r *reader) Close() error {
	r.closeBody()
	r.finished = true
	return nil
}

// totalSize is the object's size a GET response gives: the content
// length of a whole-object GET, the total of a ranged one's Content-Range
// ("bytes 0-9/100"); -1 when it gives none.
func totalSize(out *s3.GetObjectOutput, rng string) int64 {
	if rng == "" {
		if out.ContentLength != nil {
			return *out.ContentLength
		}
		return -1
	}
	_, total, ok := strings.Cut(aws.ToString(out.ContentRange), "/")
	if !ok {
		return -1
	}
	n, err := strconv.ParseInt(total, 10, 64)
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// Stat implements tiered.Driver.
func (s *driver) Stat(ctx context.Context, name string) (tiered.ObjectInfo, error) {
	key := s.key(name)
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	out, err := s.client.HeadObject(rctx, &s3.HeadObjectInput{Bucket: aws.String(s.opts.Bucket), Key: aws.String(key)})
	if err != nil {
		return tiered.ObjectInfo{}, s.wrap("head", err)
	}
	return tiered.ObjectInfo{Name: name, Size: aws.ToInt64(out.ContentLength), ModTime: aws.ToTime(out.LastModified)}, nil
}

// List implements tiered.Driver.
func (s *driver) List(ctx context.Context, prefix, startAfter string, limit int) ([]tiered.ObjectInfo, bool, error) {
	in := &s3.ListObjectsV2Input{
		Bucket:  aws.String(s.opts.Bucket),
		Prefix:  aws.String(s.prefix + prefix),
		MaxKeys: aws.Int32(int32(limit)),
	}
	if startAfter != "" {
		in.StartAfter = aws.String(s.prefix + startAfter)
	}
	var objs []tiered.ObjectInfo
	for {
		rctx, cancel := s.reqCtx(ctx)
		out, err := s.client.ListObjectsV2(rctx, in)
		cancel()
		if err != nil {
			return nil, false, s.wrap("list", err)
		}
		for _, o := range out.Contents {
			name, ok := strings.CutPrefix(aws.ToString(o.Key), s.prefix)
			if !ok {
				return nil, false, fmt.Errorf("returned key %q outside prefix %q", aws.ToString(o.Key), s.prefix)
			}
			objs = append(objs, tiered.ObjectInfo{Name: name, Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified)})
		}
		truncated := aws.ToBool(out.IsTruncated)
		if truncated && len(objs) == 0 && out.NextContinuationToken != nil {
			// A truncated page without keys: ask for the rest.
			in.ContinuationToken = out.NextContinuationToken
			continue
		}
		return objs, truncated, nil
	}
}

// Delete implements tiered.Driver: DeleteObject for one name,
// deleteBatch for more.
func (s *driver) Delete(ctx context.Context, names []string) error {
	if len(names) > 1 {
		return s.deleteBatch(ctx, names)
	}
	rctx, cancel := s.reqCtx(ctx)
	defer cancel()
	_, err := s.client.DeleteObject(rctx, &s3.DeleteObjectInput{Bucket: aws.String(s.opts.Bucket), Key: aws.String(s.key(names[0]))})
	if s.Classify(err) == tiered.ErrNotFound {
		return nil
	}
	return s.wrap("delete", err)
}

// deleteBatch is DeleteObjects in batches of up to 1000 keys,
// DeleteConcurrency batches at a time. On failure the error lists the
// names not deleted; calling again with the same names finishes.
func (s *driver) deleteBatch(ctx context.Context, names []string) error {
	keys := make([]types.ObjectIdentifier, 0, len(names))
	for _, n := range names {
		keys = append(keys, types.ObjectIdentifier{Key: aws.String(s.key(n))})
	}
	var (
		mu       sync.Mutex
		failed   []string
		firstErr error
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, s.opts.DeleteConcurrency)
	record := func(names []string, err error) {
		mu.Lock()
		failed = append(failed, names...)
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	for start := 0; start < len(keys); start += MaxDeleteBatch {
		batch := keys[start:min(start+MaxDeleteBatch, len(keys))]
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			for _, k := range keys[start:] {
				record([]string{strings.TrimPrefix(aws.ToString(k.Key), s.prefix)}, ctx.Err())
			}
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			rctx, cancel := s.reqCtx(ctx)
			defer cancel()
			out, err := s.client.DeleteObjects(rctx, &s3.DeleteObjectsInput{
				Bucket: aws.String(s.opts.Bucket),
				Delete: &types.Delete{Objects: batch, Quiet: aws.Bool(true)},
			})
			if err != nil {
				var ns []string
				for _, k := range batch {
					ns = append(ns, strings.TrimPrefix(aws.ToString(k.Key), s.prefix))
				}
				record(ns, s.wrap(fmt.Sprintf("delete %d keys from %s", len(batch), ns[0]), err))
				return
			}
			for _, e := range out.Errors {
				if aws.ToString(e.Code) == "NoSuchKey" {
					continue
				}
				n := strings.TrimPrefix(aws.ToString(e.Key), s.prefix)
				record([]string{n}, fmt.Errorf("delete %s: %s: %s", n, aws.ToString(e.Code), aws.ToString(e.Message)))
			}
		})
	}
	wg.Wait()
	if len(failed) == 0 {
		return nil
	}
	shown := failed
	more := ""
	if len(shown) > 20 {
		more = fmt.Sprintf(" and %d more", len(shown)-20)
		shown = shown[:20]
	}
	return fmt.Errorf("%d of %d deletes failed (first: %w); not deleted: %s%s",
		len(failed), len(names), firstErr, strings.Join(shown, ", "), more)
}

// Close implements tiered.Driver. Readers already returned stay usable
// until they are closed.
func (s *driver) Close() error { return nil }

// abortUpload aborts a multipart upload, even when the caller's ctx is
// done (an incomplete upload costs storage). A part whose request was
// cancelled client-side may still land on the server after the abort and
// bring the upload back (S3's documentation says to abort again then): so
// while the upload still lists parts, abort again, a few times.
func (s *driver) abortUpload(ctx context.Context, key string, uploadID *string) error {
	abort := func() error {
		actx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
		defer cancel()
		_, err := s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{
			Bucket: aws.String(s.opts.Bucket), Key: aws.String(key), UploadId: uploadID,
		})
		return err
	}
	if err := abort(); err != nil {
		return err
	}
	for i := range 3 {
		time.Sleep(time.Duration(i+1) * 20 * time.Millisecond)
		lctx, cancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
		_, err := s.client.ListParts(lctx, &s3.ListPartsInput{
			Bucket: aws.String(s.opts.Bucket), Key: aws.String(key), UploadId: uploadID,
		})
		cancel()
		if err != nil {
			return nil // gone (NoSuchUpload), or not listable: nothing more to do
		}
		if err := abort(); err != nil {
			return err
		}
	}
	return nil
}
