// Package transport is the HTTP layer of the client: retries with capped
// exponential backoff and jitter (go-retryablehttp), Retry-After, bearer
// auth and failover across several broker URLs.
package transport

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Request is one call to the broker.
type Request struct {
	Method string
	// Path is the escaped path, starting with "/", e.g. "/api/v1/pop/queue/orders".
	Path  string
	Query url.Values
	// Body is the JSON body, or nil for none.
	Body []byte
	// LongPoll marks a call that may retry without a count limit until its
	// ctx ends (a waiting pop); other calls are bounded by the policy.
	LongPoll bool
	// Timeout overrides the per-request timeout (a long poll needs more
	// than the broker's wait). Zero uses the configured one.
	Timeout time.Duration
}

// Response is what the broker answered. Every status is returned as a
// Response (the caller decides what is an error) once retries are spent.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// URL is the base URL that answered.
	URL string
}

// Doer sends requests. *Transport implements it.
type Doer interface {
	Do(ctx context.Context, r Request) (*Response, error)
}
