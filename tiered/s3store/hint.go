package s3store

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// hint says what to do about an S3 error, in words an operator can act
// on; "" when the error is not one it knows. The SDK's text alone names
// neither the cause nor the fix: a 403 does not mention credentials, and a
// missing credential shows as an instance-metadata error.
func (s *driver) hint(err error, bucketCheck bool) string {
	if err == nil {
		return ""
	}
	code, status := errorCode(err)
	msg := err.Error()
	switch {
	case code == "AccessDenied" || code == "InvalidAccessKeyId" || code == "SignatureDoesNotMatch" ||
		code == "Forbidden" || status == http.StatusForbidden:
		return fmt.Sprintf("access denied (%s): check the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or stated's --s3-access-key-id "+
			"and --s3-secret-access-key) and that they may list, get, put and delete objects in bucket %q; "+
			"a wrong --s3-region also fails the signature", orStatus(code, status), s.opts.Bucket)
	case code == "NoSuchBucket" || (bucketCheck && status == http.StatusNotFound):
		return fmt.Sprintf("bucket %q does not exist at %s: create it, or fix the bucket in the store URL (s3://bucket/prefix) or the endpoint",
			s.opts.Bucket, s.where())
	case strings.Contains(msg, "get identity") || strings.Contains(msg, "failed to refresh cached credentials") ||
		strings.Contains(msg, "no EC2 IMDS role found"):
		h := "no S3 credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or stated's --s3-access-key-id and " +
			"--s3-secret-access-key), or AWS_PROFILE for a shared config file, or run where an instance role provides them"
		if s.opts.Endpoint == "" {
			h += "; for MinIO, Ceph or another S3-compatible server, also set its endpoint (--s3-endpoint or AWS_ENDPOINT_URL_S3)"
		}
		return h
	}
	var oe *net.OpError
	if (errors.As(err, &oe) && oe.Op == "dial") || strings.Contains(msg, "connection refused") || strings.Contains(msg, "no such host") {
		return fmt.Sprintf("cannot reach %s: check that the server runs and the endpoint URL (--s3-endpoint) is right", s.where())
	}
	return ""
}

func orStatus(code string, status int) string {
	if code != "" {
		return code
	}
	return fmt.Sprintf("HTTP %d", status)
}
