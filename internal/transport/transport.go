// Package transport is the HTTP layer of the client: retries with capped
// exponential backoff and jitter (go-retryablehttp), Retry-After, bearer
// auth and failover across several broker URLs.
//
// A call's first attempt goes straight through net/http; a call to be tried
// again goes on in a go-retryablehttp retry loop. Both run this package's
// hooks: the retry decision (retryablehttp's error classification
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
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// Request is one call to the broker.
type Request struct {
	Method string
	// Path is the escaped path, starting with "/", e.g. "/api/v1/pop/queue/orders".
	Path  string
	Query url.Values
	// RawQuery is the query already encoded (url.Values.Encode), for a
	// caller that sends the same one many times; used when Query is empty.
	RawQuery string
	// Body is the JSON body, or nil for none. It is sent byte for byte on
	// every attempt and must not be modified while Do runs.
	Body []byte
	// Timeout overrides the per-request timeout (a long poll needs more
	// than the broker's wait). Zero uses the configured one. Every call,
	// a long poll included, makes at most RetryPolicy.MaxAttempts
	// attempts.
	Timeout time.Duration
	// Attempts, when positive, overrides MaxAttempts for this call: a
	// caller that retries on its own (the consume loop) asks for one
	// attempt and sees every failure.
	Attempts int
	// NoRetryAfterSend marks a call the broker does not apply
	// idempotently (a transaction, a dead-letter replay) or that must not
	// be repeated once it may have been applied (a pop, whose claim would
	// keep its messages leased while a second pop answers "empty"; net/http's
	// own resend of a GET is stopped too, see noResend): it is retried
	// only when the broker surely did not apply it. That is a failure
	// before the request could be written (no connection was got: a
	// refused or timed out dial, a DNS or TLS handshake failure), retried
	// and failed over as usual, and the answers 429 and 503, which the
	// broker sends without applying the request; a 503 whose code is
	// "outcome_unknown" is the exception and is returned as the answer.
	// Any other answer (500 and every other 5xx included) is returned at
	// once. A network failure once the request may have been written (a
	// reset, EOF, a timeout waiting for the answer, an answer cut short)
	// ends the call at once with an error matching ErrOutcomeUnknown, and
	// so does a ctx that ends then; an answer received as the ctx ends is
	// returned. Do then never returns the answer of an earlier attempt.
	NoRetryAfterSend bool
}

// ErrOutcomeUnknown is matched (errors.Is) by the error of a
// NoRetryAfterSend call that failed after its request may have reached the
// broker: the broker may or may not have applied it.
var ErrOutcomeUnknown = errors.New("transport: outcome unknown")

// outcomeUnknown is the error of a NoRetryAfterSend call cut after its
// request may have reached the broker. It matches ErrOutcomeUnknown and
// unwraps to the failure.
type outcomeUnknown struct{ err error }

func (e *outcomeUnknown) Error() string        { return e.err.Error() }
func (e *outcomeUnknown) Unwrap() error        { return e.err }
func (e *outcomeUnknown) Is(target error) bool { return target == ErrOutcomeUnknown }

// Response is what the broker answered. Every status is returned as a
// Response (the caller decides what is an error) once retries are spent.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	// URL is the base URL that answered.
	URL string
	// Attempts is the number of attempts the call made, this one
	// included (1 when it was not retried).
	Attempts int
}

// Transport sends requests to the broker with retries, Retry-After, bearer
// auth and failover across URLs. It is safe for concurrent use.
type Transport struct {
	cfg    Config
	eps    *endpoints
	client http.Client       // template of each call's client (see newCall)
	next   http.RoundTripper // what each call's client sends through
	owned  *http.Transport   // the pool New built, nil with the user's client
	rand   func() float64
	now    func() time.Time
	// header is the header every request carries, as key/value pairs.
	header [][2]string
	// shared are the headers of requests without and with a body, built
	// once, that requests share when they go through the pool New built
	// (nothing on that path writes a request's header; a user's
	// RoundTripper might, against http.RoundTripper's contract, so the
	// user's client gets a header of its own per request).
	shared [2]http.Header
	// deadlines bounds the attempts (see Deadlines); wall is the real
	// time they start at (a test may stop it: now may be a fake clock).
	deadlines Deadlines
	wall      func() time.Time
	// calls recycles the per-call machinery (see call): building it for
	// every request would cost a handful of allocations each time.
	calls sync.Pool
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
	t := &Transport{cfg: cfg, rand: cfg.Rand, now: time.Now, wall: time.Now}
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
	t.next = t.client.Transport
	if t.next == nil {
		t.next = http.DefaultTransport
	}
	// Each call's client sends through the call itself (call.RoundTrip),
	// which bounds every attempt by its own deadline: no Client.Timeout.
	t.client.Transport, t.client.Timeout = nil, 0

	t.header = append(t.header, [2]string{"Accept", "application/json"})
	if cfg.BearerToken != "" {
		t.header = append(t.header, [2]string{"Authorization", "Bearer " + cfg.BearerToken})
	}
	if cfg.UserAgent != "" {
		t.header = append(t.header, [2]string{"User-Agent", cfg.UserAgent})
	}
	if t.owned != nil {
		for i := range t.shared {
			t.shared[i] = http.Header{}
			t.setHeader(t.shared[i], i == 1)
		}
	}
	t.calls.New = func() any { return t.newCall() }
	return t, nil
}

// newPool returns a keep-alive transport with the standard settings that
// keeps up to idle idle connections per host: a clone of
// http.DefaultTransport when it is an *http.Transport, otherwise (a
// program or a test that wrapped it, for instrumentation or a mock) a new
// one with net/http's default settings. The pool never sends through a
// replaced http.DefaultTransport; WithHTTPClient is the way to that.
func newPool(idle, hosts int) *http.Transport {
	return poolFrom(http.DefaultTransport, idle, hosts)
}

// poolFrom is newPool with the default transport given.
func poolFrom(def http.RoundTripper, idle, hosts int) *http.Transport {
	tr, ok := def.(*http.Transport)
	if ok && tr != nil {
		tr = tr.Clone()
	} else {
		tr = standardTransport()
	}
	tr.MaxIdleConnsPerHost = idle
	tr.MaxIdleConns = max(tr.MaxIdleConns, idle*hosts)
	return tr
}

// standardTransport returns a new transport with the settings of
// net/http's DefaultTransport: the proxy from the environment, 30 s dial
// timeout and keep-alive, an HTTP/2 attempt, 100 idle connections kept
// 90 s, 10 s TLS handshake and 1 s Expect: 100-continue timeouts.
func standardTransport() *http.Transport {
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
	}
}

// Close closes the idle connections of the pool New built and ends the
// shared attempt deadlines. The user's own HTTPClient is left alone. Call
// it once no call is in flight.
func (t *Transport) Close() {
	t.deadlines.Close()
	if t.owned != nil {
		t.owned.CloseIdleConnections()
	}
}

// Deadlines returns the deadlines the attempts share (see Deadlines), for
// a caller that bounds several calls by one deadline too: those of the pool
// New built, or nil (nothing shared) with the user's own HTTPClient, whose
// RoundTripper may hold on to a request's ctx until it ends (each attempt
// has its own, cancelled when the attempt ends).
func (t *Transport) Deadlines() *Deadlines {
	if t.owned == nil {
		return nil
	}
	return &t.deadlines
}

// Do sends r and returns the broker's answer, retrying what RetryableErr
// and Retryable accept, at most RetryPolicy.MaxAttempts attempts in all,
// on the next healthy URL after a network error or 5xx. Every HTTP status is returned as a
// *Response; an error means no answer at all: ctx ended (the error wraps
// ctx.Err()), attempts ran out without any answer, or the request could
// not be built or sent (e.g. a TLS certificate error, not retried).
// When the ctx deadline would pass during a wait, the answer in hand is
// returned at once instead of waiting for a bare deadline error. A
// request with NoRetryAfterSend is retried less (see Request) and its
// failure after the request may have been sent matches ErrOutcomeUnknown.
func (t *Transport) Do(ctx context.Context, r Request) (*Response, error) {
	if !strings.HasPrefix(r.Path, "/") {
		return nil, fmt.Errorf("transport: path %q must start with /", r.Path)
	}
	c := t.calls.Get().(*call)
	resp, err := c.do(ctx, r)
	c.ctx, c.callState = nil, callState{} // keep nothing of this call alive
	t.calls.Put(c)
	return resp, err
}

// do runs one Do on a clean call.
func (c *call) do(ctx context.Context, r Request) (*Response, error) {
	c.ctx = ctx
	c.callState = callState{req: r, timeout: c.t.cfg.Timeout}
	if r.Timeout > 0 {
		c.timeout = r.Timeout
	}
	c.query = r.RawQuery
	if len(r.Query) > 0 {
		c.query = r.Query.Encode()
	}
	c.max = c.t.cfg.Retry.MaxAttempts
	if r.Attempts > 0 {
		c.max = r.Attempts
	}
	c.ep, c.base = c.t.eps.pick()

	req, err := http.NewRequestWithContext(ctx, r.Method, c.url(c.base), nil)
	if err != nil {
		return nil, fmt.Errorf("transport: %s %s: %w", r.Method, r.Path, err)
	}
	c.t.putHeader(req, len(r.Body) > 0)

	resp, err := c.send(req)
	closeBody(resp) // its content is in c.answer
	switch {
	case c.unknown:
		// Never an earlier attempt's answer: the last one may have been
		// applied.
		return nil, c.failure(err)
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

// url returns the request URL on base: the escaped path and the query.
func (c *call) url(base string) string {
	if c.query == "" {
		return base + c.req.Path
	}
	return base + c.req.Path + "?" + c.query
}

// putHeader gives req its headers: the shared ones on the pool New built,
// its own otherwise.
func (t *Transport) putHeader(req *http.Request, withBody bool) {
	if h := t.shared[btoi(withBody)]; h != nil {
		req.Header = h
		return
	}
	t.setHeader(req.Header, withBody)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// setHeader sets the headers of a request, with Content-Type when it has a
// body. The values share one array (each slice capped at its one value).
func (t *Transport) setHeader(h http.Header, withBody bool) {
	n := len(t.header)
	vals := make([]string, n, n+1)
	for i, kv := range t.header {
		vals[i] = kv[1]
		h[kv[0]] = vals[i : i+1 : i+1]
	}
	if withBody {
		vals = append(vals, "application/json")
		h["Content-Type"] = vals[n : n+1 : n+1]
	}
}

// newCall returns a new call of t (see init). Calls are recycled, so this
// runs rarely.
func (t *Transport) newCall() *call {
	c := &call{t: t}
	c.init()
	return c
}

// init builds the machinery of a call of c.t: its http.Client, which sends
// through the call (call.RoundTrip) into the shared pool, and the
// retryablehttp client whose hooks are the call's methods.
func (c *call) init() {
	c.hc = c.t.client
	c.hc.Transport = c
	rc := &c.rc
	rc.HTTPClient = &c.hc
	rc.Logger = nil // retryablehttp logs to stderr by default; we log via slog
	rc.RetryWaitMin = c.t.cfg.Retry.MinBackoff
	rc.RetryWaitMax = c.t.cfg.Retry.MaxBackoff
	rc.CheckRetry = c.checkRetry
	rc.Backoff = c.backoff
	rc.PrepareRetry = c.prepareRetry
	rc.ErrorHandler = c.giveUp
	c.identity[0] = "identity"
}

// send runs the attempts of the call on req (its body is c.req.Body) and
// returns what retryablehttp's loop would: the final response, or the
// error giveUp made of the failure.
//
// The first attempt goes straight to the pool (exchange), and runs
// the hooks as retryablehttp's loop runs them after an attempt: checkRetry,
// then giveUp unless the answer is clean and final. Only a call that is
// to be tried again enters the loop, after the wait checkRetry chose
// (backoff) and the failover to the URL of the next attempt
// (prepareRetry), which the loop runs before each attempt but its first,
// with the attempts that are left. Most calls get their answer at the
// first attempt: they skip the loop's wrapping of the request, a body
// reader per attempt and its bookkeeping.
func (c *call) send(req *http.Request) (*http.Response, error) {
	body := c.req.Body
	if len(body) > 0 {
		req.ContentLength = int64(len(body))
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	resp, doErr := c.exchange(req)
	retry, err := c.checkRetry(req.Context(), resp, doErr)
	if !retry && err == nil && doErr == nil {
		return resp, nil
	}
	if err == nil {
		err = doErr
	}
	if !retry || c.attempts >= c.max {
		return c.giveUp(resp, err, 1)
	}
	closeBody(resp) // kept in c.answer
	c.backoff(0, 0, 0, nil)
	if err := c.prepareRetry(req); err != nil {
		return c.giveUp(nil, err, 1)
	}
	rc := c.retryClient()
	rc.RetryMax = c.max - c.attempts - 1
	var rbody any // stays a nil interface without a body
	if len(body) > 0 {
		rbody = body
	}
	rreq := &retryablehttp.Request{Request: req}
	if err := rreq.SetBody(rbody); err != nil {
		return nil, err
	}
	return rc.Do(rreq)
}

// retryClient returns the retryablehttp client running this call's loop,
// with the attempt budget of this call.
func (c *call) retryClient() *retryablehttp.Client {
	if c.rc.HTTPClient == nil { // a call not made by newCall
		c.init()
	}
	c.rc.RetryMax = max(c.max-1, 0)
	return &c.rc
}

// failure turns the error of a call that got no usable answer into the
// error Do returns.
func (c *call) failure(err error) error {
	m, p := c.req.Method, c.req.Path
	if err == nil {
		err = errors.New("no answer")
	}
	if c.unknown {
		if ctxErr := c.ctx.Err(); ctxErr != nil {
			err = ctxErr
		}
		return &outcomeUnknown{fmt.Errorf("transport: %s %s: no answer after the request may have reached the broker, "+
			"not retried (attempt %d): %w", m, p, c.attempts, err)}
	}
	if ctxErr := c.ctx.Err(); ctxErr != nil {
		if c.lastErr != nil {
			return fmt.Errorf("transport: %s %s: %w (after %d attempt(s), last error: %v)", m, p, ctxErr, c.attempts, c.lastErr)
		}
		return fmt.Errorf("transport: %s %s: %w (after %d attempt(s))", m, p, ctxErr, c.attempts)
	}
	return fmt.Errorf("transport: %s %s: no answer after %d attempt(s): %w", m, p, c.attempts, err)
}

// RoundTrip makes the call its client's http.RoundTripper, between
// http.Client and the pool. It bounds each attempt by the per-attempt
// timeout (one deadline for all the redirect hops of an attempt, as
// http.Client.Timeout would, without the timer goroutine that costs for
// a RoundTripper other than *http.Transport; attempts that start together
// under one ctx share it, see Deadlines) and reads the answer
// completely inside the attempt, so that a connection dropped in the
// middle of a body is a retryable network error of that attempt and the
// timeout covers the body. The body is kept in the call for checkRetry;
// the response goes on with an empty one. A call has no
// CloseIdleConnections on purpose: retryablehttp calls it on the client
// after a failed call, which would empty the shared pool (and touch the
// user's own client).
func (c *call) RoundTrip(req *http.Request) (*http.Response, error) {
	if n := c.attempts + 1; c.deadlineOf != n { // first hop of attempt n
		c.started = c.t.wall()
		c.deadline, c.deadlineOf = c.started.Add(c.timeout), n
		if c.req.NoRetryAfterSend {
			c.probe = newSendProbe()
		}
	}
	// actx is the attempt's ctx: the caller's with the attempt's own
	// deadline (own) and the probe's trace, if any. (A ctx is never
	// compared with ==: a caller's ctx may be a value of a type that
	// cannot be compared.)
	ctx := req.Context()
	actx, own := ctx, false
	if dl, ok := ctx.Deadline(); !ok || c.deadline.Before(dl) {
		// Derived from the caller's ctx itself, so that the attempts of
		// its calls share it (see Deadlines).
		var end Deadline
		actx, end = c.t.Deadlines().Get(ctx, c.deadline, c.started)
		defer end.Release()
		own = true
	}
	if c.probe != nil {
		actx = httptrace.WithClientTrace(actx, &c.probe.trace)
	}
	if own || c.probe != nil {
		req = req.WithContext(actx) // a copy, which the probe may change
	}
	if c.probe != nil {
		if err := actx.Err(); err != nil {
			return nil, c.attemptError(err, ctx, actx, own) // ended before anything was sent
		}
		if resendable(req) {
			req.Body, req.GetBody, req.ContentLength = noResend{}, nil, 0 // see noResend
			req.TransferEncoding = c.identity[:]
		}
		c.probe.sending = true
	}
	var began time.Time
	if c.t.cfg.OnAttempt != nil {
		began = time.Now()
	}
	resp, err := c.t.next.RoundTrip(req)
	if err != nil {
		err = c.attemptError(err, ctx, actx, own)
		c.observe(ctx, began, 0, err)
		return nil, err
	}
	body, err := readBody(resp.Body, resp.ContentLength)
	resp.Body.Close()
	if err != nil {
		err = c.attemptError(fmt.Errorf("reading response body: %w", err), ctx, actx, own)
		c.observe(ctx, began, resp.StatusCode, err)
		return nil, err
	}
	c.observe(ctx, began, resp.StatusCode, nil)
	c.body, c.bodyOf = body, resp
	resp.Body = http.NoBody
	resp.ContentLength = int64(len(body))
	return resp, nil
}

// observe reports one attempt to Config.OnAttempt, if set.
func (c *call) observe(ctx context.Context, began time.Time, status int, err error) {
	f := c.t.cfg.OnAttempt
	if f == nil {
		return
	}
	f(ctx, Attempt{Method: c.req.Method, Path: c.req.Path, URL: c.base, Number: c.attempts + 1,
		Status: status, Duration: time.Since(began), Err: err})
}

// attemptError marks err as a timeout of the attempt when the attempt's
// own deadline (own: actx has one) passed but the caller's ctx did not end.
func (c *call) attemptError(err error, ctx, actx context.Context, own bool) error {
	if own && actx.Err() != nil && ctx.Err() == nil {
		return &attemptTimeout{err: err, timeout: c.timeout}
	}
	return err
}

// attemptTimeout is the error of an attempt cut by the per-attempt timeout.
// Like net/http's error for http.Client.Timeout, it is a net.Error whose
// Timeout is true and it matches context.DeadlineExceeded.
type attemptTimeout struct {
	err     error
	timeout time.Duration
}

func (e *attemptTimeout) Error() string {
	return fmt.Sprintf("%v (attempt timeout of %s exceeded)", e.err, e.timeout)
}

func (e *attemptTimeout) Unwrap() error        { return e.err }
func (e *attemptTimeout) Timeout() bool        { return true }
func (e *attemptTimeout) Temporary() bool      { return true }
func (e *attemptTimeout) Is(target error) bool { return target == context.DeadlineExceeded }

// maxPrealloc bounds the buffer readBody sizes by the announced length.
const maxPrealloc = 4 << 20

// readBody reads a body to its end. A body of announced length n (at most
// maxPrealloc) is read into one buffer of that size, plus one byte to
// meet the end; others grow as io.ReadAll does.
func readBody(r io.Reader, n int64) ([]byte, error) {
	if n < 0 || n > maxPrealloc {
		return io.ReadAll(r)
	}
	b := make([]byte, 0, n+1)
	for {
		m, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+m]
		switch {
		case err == io.EOF:
			return b, nil
		case err != nil:
			return b, err
		case len(b) == cap(b): // longer than announced
			rest, err := io.ReadAll(r)
			return append(b, rest...), err
		}
	}
}
