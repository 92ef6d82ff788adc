package s3store_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/smithy-go"

	"github.com/statedhq/stated/tiered"
	"github.com/statedhq/stated/tiered/s3store"
)

// s3Reply is a server that answers every request with status and, except
// for HEAD, an S3 error document with code.
func s3Reply(t *testing.T, status int, code string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		if r.Method != http.MethodHead {
			_, _ = w.Write([]byte(`<?xml version="1.0" encoding="UTF-8"?><Error><Code>` + code + `</Code><Message>m</Message></Error>`))
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func quickOptions(endpoint string) s3store.Options {
	return s3store.Options{Bucket: "bkt", Endpoint: endpoint, Region: "us-east-1", PathStyle: true,
		AccessKeyID: "k", SecretAccessKey: "s", MaxAttempts: 1, MaxBackoff: time.Millisecond, RequestTimeout: 5 * time.Second}
}

// TestErrorsNameTheFix: the S3 errors an operator meets first say what
// is wrong and what to do, and keep the SDK's error wrapped.
func TestErrorsNameTheFix(t *testing.T) {
	ctx := context.Background()
	t.Run("access denied at open", func(t *testing.T) {
		_, err := s3store.Open(ctx, quickOptions(s3Reply(t, 403, "AccessDenied")))
		mustSay(t, err, "access denied", "AWS_ACCESS_KEY_ID", `bucket "bkt"`)
	})
	t.Run("access denied on get", func(t *testing.T) {
		o := quickOptions(s3Reply(t, 403, "AccessDenied"))
		o.SkipBucketCheck = true
		s, err := s3store.Open(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tiered.ReadAll(ctx, s, "j/x", 10)
		mustSay(t, err, "access denied (AccessDenied)", "--s3-access-key-id")
		var ae smithy.APIError
		if !errors.As(err, &ae) || ae.ErrorCode() != "AccessDenied" {
			t.Fatalf("the SDK's error is not wrapped: %v", err)
		}
	})
	t.Run("missing bucket at open", func(t *testing.T) {
		_, err := s3store.Open(ctx, quickOptions(s3Reply(t, 404, "NoSuchBucket")))
		mustSay(t, err, `bucket "bkt" does not exist`, "create it")
	})
	t.Run("missing bucket on put", func(t *testing.T) {
		o := quickOptions(s3Reply(t, 404, "NoSuchBucket"))
		o.SkipBucketCheck = true
		s, err := s3store.Open(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		err = tiered.PutBytes(ctx, s, "j/x", []byte("x"))
		mustSay(t, err, `bucket "bkt" does not exist`)
		if errors.Is(err, tiered.ErrNotFound) {
			t.Fatalf("a missing bucket is taken for a missing object: %v", err)
		}
	})
	t.Run("no credentials", func(t *testing.T) {
		for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
			"AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"} {
			t.Setenv(k, "")
		}
		t.Setenv("AWS_CONFIG_FILE", t.TempDir()+"/none")
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
		t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
		o := quickOptions(s3Reply(t, 200, ""))
		o.AccessKeyID, o.SecretAccessKey = "", ""
		_, err := s3store.Open(ctx, o)
		mustSay(t, err, "no S3 credentials found", "AWS_ACCESS_KEY_ID")
		if strings.Contains(err.Error(), "--s3-endpoint or AWS_ENDPOINT_URL_S3") {
			t.Fatalf("with an endpoint set, the hint still asks for one: %v", err)
		}
	})
	t.Run("endpoint down", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		_, err = s3store.Open(ctx, quickOptions("http://"+addr))
		mustSay(t, err, "cannot reach http://"+addr)
	})
}

func mustSay(t *testing.T, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("no error")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not say %q:\n%v", w, err)
		}
	}
}
