// Package transport is the HTTP layer of the client: retries with capped
// exponential backoff and jitter (go-retryablehttp), Retry-After, bearer
// auth and failover across several broker URLs.
//
// Each call runs one go-retryablehttp retry loop whose hooks are this
// package's: the retry decision (retryablehttp's error classification
// plus URL health bookkeeping), the wait (computed here, slept through the
// injectable Config.Sleep under the call's ctx), the URL of the next
// attempt (failover) and the final answer (the last response is returned,
// never swallowed). retryablehttp's own logger is off; events go to
// Config.Logger.
package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// Request is one call to the broker.
type Request struct {
	Method string
	// Path is the escaped path, starting with "/", e.g. "/api/v1/pop/queue/orders".
	Path  string
	Query url.Values
	// Body is the JSON body, or nil for none. It is sent byte for byte on
	// every attempt and must not be modified while Do runs.
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

var _ Doer = (*Transport)(nil)

// Transport sends requests to the broker with retries, Retry-After, bearer
// auth and failover across URLs. It is safe for concurrent use.
type Transport struct {
	cfg    Config
	eps    *endpoints
	client http.Client     // template for each call; Timeout set per call
	owned  *http.Transport // the pool New built, nil with the user's client
	rand   func() float64
	now    func() time.Time
}

// New checks cfg, fills in defaults and returns a Transport. A bad or
// missing URL or a negative duration is an error.
func New(cfg Config) (*Transport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	bases := make([]string, len(cfg.URLs))
	for i, raw := range cfg.URLs {
		if bases[i], err = parseBaseURL(raw); err != nil {
			return nil, err
		}
	}
	t := &Transport{cfg: cfg, rand: cfg.Rand, now: time.Now}
	if t.rand == nil {
		t.rand = rand.Float64
	}
	t.eps = newEndpoints(bases, cfg.Retry.FailoverPause, func() time.Time { return t.now() })

	if cfg.HTTPClient != nil {
		t.client = *cfg.HTTPClient
	} else {
		t.owned = newPool(cfg.IdleConns, len(bases))
		t.client = http.Client{Transport: t.owned}
	}
	rt := t.client.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	t.client.Transport = bufferingRT{rt}
	return t, nil
}

// newPool returns a keep-alive transport with the standard one's settings
// that keeps up to idle idle connections per host.
func newPool(idle, hosts int) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = idle
	tr.MaxIdleConns = max(tr.MaxIdleConns, idle*hosts)
	return tr
}

// Close closes the idle connections of the pool New built. The user's own
// HTTPClient is left alone. Call it once no call is in flight.
func (t *Transport) Close() {
	if t.owned != nil {
		t.owned.CloseIdleConnections()
	}
}

// Do sends r and returns the broker's answer, retrying network errors,
// 5xx (except 501) and 429 as the policy says, on the next healthy URL
// after a network error or 5xx. Every HTTP status is returned as a
// *Response; an error means no answer at all: ctx ended (the error wraps
// ctx.Err()), attempts ran out without any answer, or the request could
// not be built or sent (e.g. a TLS certificate error, not retried).
// When the ctx deadline would pass during a wait, the answer in hand is
// returned at once instead of waiting for a bare deadline error.
func (t *Transport) Do(ctx context.Context, r Request) (*Response, error) {
	if !strings.HasPrefix(r.Path, "/") {
		return nil, fmt.Errorf("transport: path %q must start with /", r.Path)
	}
	c := &call{t: t, ctx: ctx, req: r, suffix: r.Path}
	if len(r.Query) > 0 {
		c.suffix += "?" + r.Query.Encode()
	}
	if !r.LongPoll {
		c.max = t.cfg.Retry.MaxAttempts
	}
	c.ep, c.base = t.eps.pick()

	var body any // stays a nil interface without a body
	if len(r.Body) > 0 {
		body = r.Body
	}
	req, err := retryablehttp.NewRequestWithContext(ctx, r.Method, c.base+c.suffix, body)
	if err != nil {
		return nil, fmt.Errorf("transport: %s %s: %w", r.Method, r.Path, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if t.cfg.BearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+t.cfg.BearerToken)
	}
	if t.cfg.UserAgent != "" {
		req.Header.Set("User-Agent", t.cfg.UserAgent)
	}

	resp, err := c.retryClient().Do(req)
	closeBody(resp) // its content is in c.answer
	switch {
	case err == nil && c.answer != nil:
		return c.answer, nil
	case c.ctx.Err() != nil || c.abort != nil:
		return nil, c.failure(err)
	case err != nil && c.answer != nil:
		// The last attempts got no answer, an earlier one did: that
		// answer is the outcome (the caller maps its status).
		return c.answer, nil
	default:
		return nil, c.failure(err)
	}
}

// retryClient builds the retryablehttp client running this call's loop.
// It is cheap: the pool is shared through the http.Client copy.
func (c *call) retryClient() *retryablehttp.Client {
	hc := c.t.client
	hc.Timeout = c.t.cfg.Timeout
	if c.req.Timeout > 0 {
		hc.Timeout = c.req.Timeout
	}
	retryMax := math.MaxInt // long poll: until ctx ends
	if c.max > 0 {
		retryMax = c.max - 1
	}
	return &retryablehttp.Client{
		HTTPClient:   &hc,
		Logger:       nil, // retryablehttp logs to stderr by default; we log via slog
		RetryWaitMin: c.t.cfg.Retry.MinBackoff,
		RetryWaitMax: c.t.cfg.Retry.MaxBackoff,
		RetryMax:     retryMax,
		CheckRetry:   c.checkRetry,
		Backoff:      c.backoff,
		PrepareRetry: c.prepareRetry,
		ErrorHandler: c.giveUp,
	}
}

// failure turns the error of a call that got no usable answer into the
// error Do returns.
func (c *call) failure(err error) error {
	m, p := c.req.Method, c.req.Path
	if err == nil {
		err = errors.New("no answer")
	}
	if ctxErr := c.ctx.Err(); ctxErr != nil {
		if c.lastErr != nil {
			return fmt.Errorf("transport: %s %s: %w (after %d attempt(s), last error: %v)", m, p, ctxErr, c.attempts, c.lastErr)
		}
		return fmt.Errorf("transport: %s %s: %w (after %d attempt(s))", m, p, ctxErr, c.attempts)
	}
	return fmt.Errorf("transport: %s %s: no answer after %d attempt(s): %w", m, p, c.attempts, err)
}

// bufferingRT reads each answer completely inside the attempt, so that a
// connection dropped in the middle of a body is a retryable network error
// of that attempt and the per-attempt timeout covers the body. It has no
// CloseIdleConnections on purpose: retryablehttp calls it on the client
// after a failed call, which would empty the shared pool (and touch the
// user's own client).
type bufferingRT struct{ next http.RoundTripper }

// RoundTrip sends req and returns its answer with the body in memory.
func (b bufferingRT) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading response body: %w", err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	return resp, nil
}
