package s3store

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/smithy-go/middleware"
	"golang.org/x/time/rate"

	"github.com/statedhq/stated/tiered/cost"
)

// IsThrottle reports whether err is an answer asking to slow down: an S3
// SlowDown, a throttling code the SDK knows (Throttling,
// RequestLimitExceeded, ...), or a 503 or 429 status.
func IsThrottle(err error) bool {
	if err == nil {
		return false
	}
	if retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err).Bool() {
		return true
	}
	code, status := errorCode(err)
	if _, ok := retry.DefaultThrottleErrorCodes[code]; ok {
		return true
	}
	return status == http.StatusServiceUnavailable || status == http.StatusTooManyRequests
}

// retryer is the SDK's standard retryer (exponential backoff with jitter,
// from 1 s for throttling) with two budgets: ThrottleMaxAttempts for a
// request whose last answer was throttling, MaxAttempts for others.
type retryer struct {
	*retry.Standard
	maxAttempts int
}

func newRetryer(opts Options) aws.RetryerV2 {
	return retryer{
		Standard: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = opts.ThrottleMaxAttempts
			o.MaxBackoff = opts.MaxBackoff
			// The retry quota is one bucket per client: under a spell of
			// SlowDown it would run dry after about 100 retries and fail
			// every request at once, surfacing throttling as failed
			// checkpoints. The per-request budgets bound retries instead.
			o.RateLimiter = ratelimit.None
			o.Throttles = append(o.Throttles, retry.IsErrorThrottleFunc(func(err error) aws.Ternary {
				if IsThrottle(err) {
					return aws.TrueTernary
				}
				return aws.UnknownTernary
			}))
		}),
		maxAttempts: opts.MaxAttempts,
	}
}

// RetryDelay implements aws.Retryer: it ends a request that failed other
// than by throttling after maxAttempts attempts.
func (r retryer) RetryDelay(attempt int, err error) (time.Duration, error) {
	if attempt >= r.maxAttempts && !IsThrottle(err) {
		return 0, &retry.MaxAttemptsError{Attempt: attempt, Err: err}
	}
	return r.Standard.RetryDelay(attempt, err)
}

// attemptsKey holds the attempt count of one operation in its context.
type attemptsKey struct{}

// attemptMiddleware counts every HTTP attempt of every operation into
// opts.Requests, by kind, and the throttling answers; with a request rate
// it also waits for a token before each attempt. It sits right after the
// SDK's retry loop, so that each attempt passes through it (and is signed
// after its wait).
func attemptMiddleware(opts Options) func(*middleware.Stack) error {
	var lim *rate.Limiter
	if opts.RequestsPerSecond > 0 {
		lim = rate.NewLimiter(rate.Limit(opts.RequestsPerSecond), opts.Burst)
	}
	counter := opts.Requests
	return func(stack *middleware.Stack) error {
		err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc("stated.AttemptCount",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				return next.HandleInitialize(context.WithValue(ctx, attemptsKey{}, new(int)), in)
			}), middleware.Before)
		if err != nil {
			return err
		}
		count := middleware.FinalizeMiddlewareFunc("stated.CountRequests",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				kind := cost.S3Kind(awsmiddleware.GetOperationName(ctx))
				if lim != nil {
					if err := lim.Wait(ctx); err != nil {
						return middleware.FinalizeOutput{}, middleware.Metadata{}, &aws.RequestCanceledError{Err: err}
					}
				}
				// Attempts of one operation run one after another.
				retried := false
				if n, ok := ctx.Value(attemptsKey{}).(*int); ok {
					*n++
					retried = *n > 1
				}
				out, md, err := next.HandleFinalize(ctx, in)
				if sent(err) {
					counter.Request(kind, retried)
					if IsThrottle(err) {
						counter.Throttle(kind)
					}
				}
				return out, md, err
			})
		if _, ok := stack.Finalize.Get("Retry"); ok {
			return stack.Finalize.Insert(count, "Retry", middleware.After)
		}
		return stack.Finalize.Add(count, middleware.Before)
	}
}

// sent reports whether an attempt that ended with err reached the server
// (an answer, or a connection broken after sending): a request refused
// before it left, e.g. by a cancelled context, is not billed.
func sent(err error) bool {
	if err == nil {
		return true
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return true
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}
