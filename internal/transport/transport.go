// Package transport is the HTTP layer of the client: a go-retryablehttp
// Client whose CheckRetry hook is the one classifier of what is retried,
// whose Backoff hook is the one wait (Backoff, with Retry-After), and whose
// RequestLogHook and PrepareRetry hooks start each attempt and fail a retry
// over to the next healthy broker URL; http.Client sends every attempt,
// redirects included, with bearer auth, on a keep-alive pool sized for long
// polls. Events go to Config.Logger and Config.OnAttempt.
package transport

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// Request is one call to the broker.
type Request struct {
	Method string
	// Path is the escaped path, starting with "/", e.g. "/api/v1/pop/queue/orders".
	Path  string
	Query url.Values
	// RawQuery is the query already encoded, used when Query is empty.
	RawQuery string
	// Body is the JSON body, nil for none, sent as it is on every attempt.
	Body []byte
	// Timeout, when positive, overrides Config.Timeout (a long poll needs
	// more than the broker's wait); Attempts, RetryPolicy.MaxAttempts (the
	// consume loop, which retries on its own, asks for one).
	Timeout  time.Duration
	Attempts int
	// NoRetryAfterSend marks a call not applied idempotently (a
	// transaction, a DLQ replay) or not to be repeated once it may have
	// been (a pop, whose claim leases messages). It is sent again only
	// after a failure before the request could be written (see
	// mayHaveSent) or a 429 or 503 that MayHaveApplied says was not
	// applied; any other answer is returned at once. A failure after the
	// request may have been written, or a ctx that ends then, is an error
	// matching ErrOutcomeUnknown (never an earlier attempt's answer); an
	// answer received as the ctx ends is returned. net/http's own resend
	// of a GET is stopped too (see noResend).
	NoRetryAfterSend bool
	// Key is the call's routing key under the Affinity balance: calls
	// with the same key go to the same URL while it is not resting. Empty:
	// any URL.
	Key string
}

// ErrOutcomeUnknown is matched (errors.Is) by the error of a
// NoRetryAfterSend call that failed after its request may have reached the
// broker: the broker may or may not have applied it.
var ErrOutcomeUnknown = errors.New("transport: outcome unknown")

// ErrNotSent is matched (errors.Is) by the error of a call that got no
// answer and none of whose attempts may have written its request where a
// broker could read it: each failed before net/http had a connection for
// it (a refused or timed out dial, a DNS failure) or before any of it was
// written on the one it had, such as one the broker had already closed
// (see mayHaveSent); or the ctx ended before any attempt. The broker
// received nothing, so nothing was applied.
var ErrNotSent = errors.New("transport: request not sent")

// notSent matches ErrNotSent and unwraps to the failure.
type notSent struct{ err error }

func (e *notSent) Error() string        { return e.err.Error() }
func (e *notSent) Unwrap() error        { return e.err }
func (e *notSent) Is(target error) bool { return target == ErrNotSent }

// outcomeUnknown matches ErrOutcomeUnknown and unwraps to the failure.
type outcomeUnknown struct{ err error }

func (e *outcomeUnknown) Error() string        { return e.err.Error() }
func (e *outcomeUnknown) Unwrap() error        { return e.err }
func (e *outcomeUnknown) Is(target error) bool { return target == ErrOutcomeUnknown }

// Response is what the broker answered, whatever the status: the base URL
// that answered (the request went to URL + Path) and the number of
// attempts the call made, this one included.
type Response struct {
	Status   int
	Header   http.Header
	Body     []byte
	URL      string
	Attempts int
	// OtherMayHaveApplied: another attempt of the call than the one
	// answered may have been applied (it got no answer after its request
	// may have been written, or an answer MayHaveApplied says yes to),
	// whatever this answer says.
	OtherMayHaveApplied bool
}

// Transport sends requests to the broker with retries, Retry-After, bearer
// auth, and its calls spread over several URLs by Config.Balance, with
// failover. It is safe for concurrent use.
type Transport struct {
	cfg    Config
	eps    *endpoints
	client http.Client     // what each call's client copies (its Timeout is the call's)
	owned  *http.Transport // the pool New built, nil with the user's client
	header [2]http.Header  // every request's headers, without and with a body
	now    func() time.Time
	calls  sync.Pool // of *call, built once (newCall), reset per Do
}

// New checks cfg, fills in defaults and returns a Transport. A bad or
// missing URL or a negative duration is an error.
func New(cfg Config) (*Transport, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	bases, err := parseBaseURLs(cfg.URLs)
	if err != nil {
		return nil, err
	}
	t := &Transport{cfg: cfg, now: time.Now}
	t.eps = newEndpoints(bases, cfg.Retry.FailoverPause, func() time.Time { return t.now() }, cfg.Balance)
	if cfg.HTTPClient != nil { // as it is, but its pool (see keepIdle)
		t.client = *cfg.HTTPClient
		t.client.Transport = keepIdle{cmp.Or[http.RoundTripper](t.client.Transport, http.DefaultTransport)}
	} else {
		t.owned = newPool(http.DefaultTransport, cfg.IdleConns, len(bases))
		t.client = http.Client{Transport: t.owned}
	}
	h := http.Header{"Accept": {"application/json"}}
	if cfg.BearerToken != "" {
		h.Set("Authorization", "Bearer "+cfg.BearerToken)
	}
	if cfg.UserAgent != "" {
		h.Set("User-Agent", cfg.UserAgent)
	}
	t.header = [2]http.Header{h, h.Clone()}
	t.header[1].Set("Content-Type", "application/json")
	t.calls.New = func() any { return t.newCall() }
	return t, nil
}

// keepIdle is the user's RoundTripper without its CloseIdleConnections,
// which retryablehttp calls after a failed call.
type keepIdle struct{ http.RoundTripper }

// newPool returns a keep-alive pool that keeps up to idle idle connections
// per host: a clone of def (http.DefaultTransport) when it is an
// *http.Transport, else (a program that wrapped it, for instrumentation
// or a mock) one with net/http's default settings: never a replaced
// http.DefaultTransport (WithHTTPClient is the way to that).
func newPool(def http.RoundTripper, idle, hosts int) *http.Transport {
	tr, ok := def.(*http.Transport)
	if ok && tr != nil {
		tr = tr.Clone()
	} else {
		d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}
		tr = &http.Transport{ // the settings of net/http's DefaultTransport
			Proxy: http.ProxyFromEnvironment, DialContext: d.DialContext, ForceAttemptHTTP2: true,
			MaxIdleConns: 100, IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: 10 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
	}
	tr.MaxIdleConnsPerHost = idle
	tr.MaxIdleConns = max(tr.MaxIdleConns, idle*hosts)
	return tr
}

// AllResting reports whether every URL rests after a failure (see
// RetryPolicy.FailoverPause): a call now would go to a URL that failed,
// the one that failed longest ago.
func (t *Transport) AllResting() bool { return t.eps.allResting() }

// Close closes the idle connections of the pool New built. The user's own
// HTTPClient is left alone. Call it once no call is in flight.
func (t *Transport) Close() {
	if t.owned != nil {
		t.owned.CloseIdleConnections()
	}
}

// call is the machinery of a Do: a retryablehttp.Client whose hooks are
// the call's methods (run one after another on Do's goroutine), the
// http.Client it sends with, the probe (what happened to the connection
// the attempt asked net/http for: see mayHaveSent), and the call's state.
type call struct {
	t     *Transport
	hc    http.Client
	rc    retryablehttp.Client
	probe probe
	trace httptrace.ClientTrace
	callState
}

// probe is what the httptrace events of one attempt said of the
// connection net/http took for it last (net/http takes another after a
// reused one failed before the request was written).
type probe struct {
	getConn, gotConn atomic.Bool
	wrote            atomic.Bool // WroteRequest without an error, on a connection not found closed
	closed           atomic.Bool // the broker had closed the connection when net/http got it: see gotConnection
	h2               atomic.Bool // an HTTP/2 connection, whose streams start before WroteRequest
	earlier          atomic.Bool // a connection net/http took before may have had the request written
	peek             peeker      // used on the call's goroutine only (GotConn)
}

func (p *probe) reset() {
	p.getConn.Store(false)
	p.gotConn.Store(false)
	p.wrote.Store(false)
	p.closed.Store(false)
	p.h2.Store(false)
	p.earlier.Store(false)
}

// getConnection starts a connection of the attempt: the one before may
// have taken the request.
func (p *probe) getConnection() {
	if p.gotConn.Load() && p.wrote.Load() {
		p.earlier.Store(true)
	}
	p.getConn.Store(true)
	p.gotConn.Store(false)
	p.wrote.Store(false)
	p.closed.Store(false)
	p.h2.Store(false)
}

// gotConnection looks at the connection net/http got, before it writes
// the request: an HTTP/1 connection (pooled, or one the broker accepted
// as it went down) whose socket already holds the broker's close is
// closed here, so that nothing of the request is written on it; the
// attempt fails and is "not sent" (mayHaveSent). net/http's reader of a
// pooled connection notices the close and drops the connection by itself,
// but it may not have run yet on a busy machine.
func (p *probe) gotConnection(info httptrace.GotConnInfo) {
	p.gotConn.Store(true)
	if tc, ok := info.Conn.(*tls.Conn); ok && tc.ConnectionState().NegotiatedProtocol == http2Proto {
		p.h2.Store(true)
		return
	}
	if info.Conn != nil && p.peek.peerClosed(info.Conn) {
		p.closed.Store(true)
		_ = info.Conn.Close()
	}
}

const http2Proto = "h2"

// wroteRequest records a request written (to net/http's buffer at least)
// on a connection not found closed.
func (p *probe) wroteRequest(w httptrace.WroteRequestInfo) {
	if w.Err == nil && !p.closed.Load() {
		p.wrote.Store(true)
	}
}

type callState struct {
	ctx      context.Context
	req      Request
	query    string // encoded query, "" without one
	ep       int    // index of the URL of the current attempt
	base     string // its base URL
	max      int    // attempt budget
	attempts int    // attempts made so far
	began    time.Time
	status   int       // the current attempt's answer status, 0 without one
	answer   *Response // the last answer received, if any
	final    bool      // answer is the outcome
	lastErr  error     // the last attempt's failure, nil when it was answered
	stop     error     // set by backoff: end the loop with the answer in hand
	unknown  bool      // NoRetryAfterSend: the last attempt failed after it may have been sent
	sent     bool      // an attempt may have written the request (or was answered)
	maybes   int       // attempts that may have been applied: no answer after it may have been written, or an answer that says so
	ansMaybe bool      // answer is one of them
}

// errNoTime ends a call whose ctx would end during the wait (see backoff).
var errNoTime = errors.New("no time left to retry")

// newCall builds the machinery of one Do.
func (t *Transport) newCall() *call {
	c := &call{t: t, hc: t.client}
	c.rc = retryablehttp.Client{
		HTTPClient:     &c.hc,
		RetryWaitMin:   t.cfg.Retry.MinBackoff,
		RetryWaitMax:   t.cfg.Retry.MaxBackoff,
		RequestLogHook: c.startAttempt,
		CheckRetry:     c.checkRetry,
		Backoff:        c.backoff,
		PrepareRetry:   c.prepareRetry,
		ErrorHandler:   retryablehttp.PassthroughErrorHandler, // Do reads the call's state
	}
	c.trace.GetConn = func(string) { c.probe.getConnection() }
	c.trace.GotConn = c.probe.gotConnection
	c.trace.WroteRequest = c.probe.wroteRequest
	return c
}

// Do sends r and returns the broker's answer, retrying what checkRetry
// accepts, at most RetryPolicy.MaxAttempts attempts, on the next healthy
// URL after a network error or 5xx. Every status is a *Response (the last
// answer when later attempts got none, or when the ctx would end during
// the wait); an error means no answer: ctx ended (the error wraps
// ctx.Err()), attempts ran out, or the request cannot be sent (e.g. an
// untrusted certificate). See Request.NoRetryAfterSend for ErrOutcomeUnknown;
// an error of a call none of whose attempts may have been sent matches
// ErrNotSent.
func (t *Transport) Do(ctx context.Context, r Request) (*Response, error) {
	if !strings.HasPrefix(r.Path, "/") {
		return nil, fmt.Errorf("transport: path %q must start with /", r.Path)
	}
	c := t.calls.Get().(*call)
	resp, err := c.do(ctx, r)
	c.callState = callState{} // keeps nothing of the call alive
	t.calls.Put(c)
	return resp, err
}

func (c *call) do(ctx context.Context, r Request) (*Response, error) {
	c.callState = callState{ctx: ctx, req: r, query: r.RawQuery, max: c.t.cfg.Retry.MaxAttempts}
	if len(r.Query) > 0 {
		c.query = r.Query.Encode()
	}
	if r.Attempts > 0 {
		c.max = r.Attempts
	}
	c.rc.RetryMax = c.max - 1
	c.hc.Timeout = cmp.Or(r.Timeout, c.t.cfg.Timeout)
	c.ep, c.base = c.t.eps.pick(r.Key)
	if err := ctx.Err(); err != nil {
		return nil, c.failure(err) // nothing sent
	}
	// The probe, on every call: whether an attempt may have been sent
	// decides ErrNotSent, and for NoRetryAfterSend whether to resend.
	trace := &c.trace
	if httptrace.ContextClientTrace(ctx) != nil {
		cp := c.trace // WithClientTrace composes the trace of ctx into it
		trace = &cp
	}
	hctx := httptrace.WithClientTrace(ctx, trace)
	req, err := http.NewRequestWithContext(hctx, r.Method, c.url(c.base), nil)
	if err != nil {
		return nil, c.failure(err)
	}
	req.Header = c.t.header[min(len(r.Body), 1)] // read only: net/http and retryablehttp never write it
	if c.t.owned == nil {
		req.Header = req.Header.Clone() // the user's RoundTripper might
	}
	rreq := &retryablehttp.Request{Request: req}
	switch {
	case len(r.Body) > 0:
		if err := rreq.SetBody(r.Body); err != nil {
			return nil, c.failure(err)
		}
	case r.NoRetryAfterSend && (r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodOptions):
		req.Body, req.TransferEncoding = noResend{}, []string{"identity"}
	}
	resp, err := c.rc.Do(rreq)
	if resp != nil {
		resp.Body.Close() // read by checkRetry
	}
	switch {
	case c.unknown:
		return nil, c.failure(cmp.Or(c.lastErr, err))
	case c.final || (c.answer != nil && c.ctx.Err() == nil):
		others := c.maybes
		if c.ansMaybe {
			others--
		}
		c.answer.OtherMayHaveApplied = others > 0
		return c.answer, nil
	case c.ctx.Err() != nil:
		return nil, c.failure(c.ctx.Err())
	}
	return nil, c.failure(cmp.Or(c.lastErr, err))
}

// url returns the request URL on base.
func (c *call) url(base string) string {
	if c.query == "" {
		return base + c.req.Path
	}
	return base + c.req.Path + "?" + c.query
}

// startAttempt, the RequestLogHook, resets the probe and starts the clock.
func (c *call) startAttempt(_ retryablehttp.Logger, _ *http.Request, _ int) {
	c.probe.reset()
	if c.t.cfg.OnAttempt != nil {
		c.began = time.Now()
	}
}

// prepareRetry, the PrepareRetry hook, ends a call whose ctx ended or whose
// wait was cut (errNoTime), and points the retry at the next healthy URL.
func (c *call) prepareRetry(req *http.Request) error {
	if c.stop != nil {
		return c.stop
	}
	if err := c.ctx.Err(); err != nil {
		return err
	}
	ep, base := c.t.eps.pick(c.req.Key)
	u, err := url.Parse(c.url(base))
	if err != nil {
		return err
	}
	if ep != c.ep {
		c.logEvent(slog.LevelDebug, "queen transport: failing over", "to", base)
	}
	c.ep, c.base = ep, base
	req.URL, req.Host = u, "" // the host from the URL
	return nil
}

// failure turns the error of a call that got no usable answer into the
// error Do returns; it names the URL of the last attempt, and matches
// ErrNotSent when no attempt may have been sent.
func (c *call) failure(err error) error {
	switch {
	case !c.sent: // unknown implies sent
		return &notSent{c.failureText(err)}
	case c.maybes > 0 && !c.unknown:
		// A retried call whose attempts ran out after one may have been
		// applied: its outcome is open, as a call sent once is.
		return &outcomeUnknown{c.failureText(err)}
	}
	return c.failureText(err)
}

func (c *call) failureText(err error) error {
	where := c.req.Method + " " + c.base + c.req.Path
	ctxErr := c.ctx.Err()
	switch {
	case c.unknown:
		return &outcomeUnknown{fmt.Errorf("transport: %s: no answer after the request may have reached the broker, "+
			"not retried (attempt %d): %w", where, c.attempts, cmp.Or(ctxErr, err))}
	case ctxErr != nil && c.lastErr != nil && !errors.Is(c.lastErr, ctxErr):
		return fmt.Errorf("transport: %s: %w (after %d attempt(s), last error: %v)", where, ctxErr, c.attempts, c.lastErr)
	case ctxErr != nil:
		return fmt.Errorf("transport: %s: %w (after %d attempt(s))", where, ctxErr, c.attempts)
	}
	return fmt.Errorf("transport: %s: no answer after %d attempt(s): %w", where, c.attempts, err)
}

// observe reports the current attempt to Config.OnAttempt.
func (c *call) observe() {
	if f := c.t.cfg.OnAttempt; f != nil {
		f(c.ctx, Attempt{Method: c.req.Method, Path: c.req.Path, URL: c.base, Number: c.attempts,
			Status: c.status, Duration: time.Since(c.began), Err: c.lastErr})
	}
}

// noResend is the body of a NoRetryAfterSend GET: net/http resends a GET
// without a body when a reused connection closes after the request was
// written, and a body it cannot rewind stops that. Empty, sent unchunked
// ("identity"), it is on the wire no body. (No 307 or 308 is followed.)
type noResend struct{}

func (noResend) Read([]byte) (int, error)         { return 0, io.EOF }
func (noResend) Close() error                     { return nil }
func (noResend) WriteTo(io.Writer) (int64, error) { return 0, nil } // spares io.Copy a buffer

// readBody reads a body to its end, into one buffer of the announced
// length n (at most 4 MiB) and bytes.MinRead to meet the end.
func readBody(r io.Reader, n int64) ([]byte, error) {
	buf := bytes.NewBuffer(make([]byte, 0, min(max(n, 0), 4<<20)+bytes.MinRead))
	_, err := buf.ReadFrom(r)
	return buf.Bytes(), err
}

// logEvent logs an event of the current attempt.
func (c *call) logEvent(level slog.Level, msg string, extra ...any) {
	if log := c.t.cfg.Logger; log.Enabled(c.ctx, level) {
		log.Log(c.ctx, level, msg, append([]any{"method", c.req.Method, "path", c.req.Path, "url", c.base,
			"attempt", c.attempts, "status", c.status, "error", c.lastErr}, extra...)...)
	}
}
