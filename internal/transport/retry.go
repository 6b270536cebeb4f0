package transport

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/queen-go/queen/internal/wire"
)

// call is one Do: its state, which the hooks given to retryablehttp
// share, and the clients that run it. retryablehttp runs the hooks of one
// call sequentially, so no lock. Transport recycles calls: callState is
// reset for each Do, the rest is built once (see call.init).
type call struct {
	t   *Transport
	ctx context.Context
	callState

	hc http.Client          // its Transport is the call (RoundTrip)
	rc retryablehttp.Client // hooks bound to the call's methods

	// identity is {"identity"}, the TransferEncoding of a request sent
	// with noResend (net/http only reads it).
	identity [1]string
}

// callState is the state of one Do.
type callState struct {
	req   Request
	query string // encoded query, "" without one (Query or RawQuery)

	ep   int    // index of the URL of the current attempt
	base string // its base URL

	timeout    time.Duration // per-attempt timeout
	started    time.Time     // start of the current attempt
	deadline   time.Time     // end of the current attempt
	deadlineOf int           // attempt (from 1) that deadline is of

	body   []byte         // body of bodyOf, read by RoundTrip
	bodyOf *http.Response // the last response RoundTrip got

	max      int           // attempt budget (RetryPolicy.MaxAttempts)
	attempts int           // attempts made so far
	wait     time.Duration // wait before the next attempt
	lastErr  error         // network error of the last attempt, if any
	answer   *Response     // the last answer received, if any
	abort    error         // set when Sleep or URL rewriting failed: stop the loop

	probe   *sendProbe // NoRetryAfterSend: what the current attempt got to
	unknown bool       // NoRetryAfterSend: the last attempt failed after it may have been sent
}

// sendProbe tells, for one attempt of a NoRetryAfterSend call, whether the
// request may have been written. net/http writes a request only on a
// connection it got (httptrace GotConn); an attempt that asked for one
// (GetConn) and got none failed while connecting, before anything was
// sent. Each attempt has its own probe: net/http may call hooks late, from
// other goroutines.
type sendProbe struct {
	sending          bool // RoundTrip handed the request to the pool
	getConn, gotConn atomic.Bool
	trace            httptrace.ClientTrace // its hooks set getConn and gotConn
}

func newSendProbe() *sendProbe {
	p := &sendProbe{}
	p.trace.GetConn = func(string) { p.getConn.Store(true) }
	p.trace.GotConn = func(httptrace.GotConnInfo) { p.gotConn.Store(true) }
	return p
}

// noResend is the body a NoRetryAfterSend request without a body of its
// own is sent with. net/http sends a request again by itself, on a new
// connection, when a reused connection closes after the request was
// written and before any answer (a broker's keep-alive timeout, or a
// broker that applied a pop and then lost the connection), if the request
// is one it deems safe to repeat: an idempotent method (GET) with no body
// or a body it can rewind. For a pop that resend is what must not happen
// (the first claim may hold messages). A body net/http cannot rewind
// makes the request not repeatable; being empty, it sends nothing. It goes
// with the transfer encoding "identity" (call.identity), which net/http
// documents as the way to send a body of unknown length unchunked
// (http.Request.Write): written as it is, with no Content-Length and no
// Transfer-Encoding header, it is the wire of a GET without a body.
// (Without it, net/http would read a byte of the body in a goroutine of
// its own, under a timer, to learn that it is empty: a goroutine and a
// timer a pop.)
type noResend struct{}

func (noResend) Read([]byte) (int, error) { return 0, io.EOF }
func (noResend) Close() error             { return nil }

// WriteTo writes nothing. net/http copies a body with io.Copy, which,
// without it, would go down to the connection's ReadFrom and a 32 KiB
// buffer of its own to copy nothing.
func (noResend) WriteTo(io.Writer) (int64, error) { return 0, nil }

// resendable reports whether net/http may send req again by itself and
// noResend stops it: GET, HEAD or OPTIONS without a body (the methods
// net/http both repeats and sends an empty body with as no body at all).
func resendable(req *http.Request) bool {
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return req.Body == nil || req.Body == http.NoBody
	}
	return false
}

// mayHaveSent reports whether the attempt that probe watched and that
// failed with err may have written its request. Without a probe, or before
// sending, the attempt never got as far as the pool. A RoundTripper that
// reports no connection events at all (the user's own) is trusted only
// with a dial error.
func (p *sendProbe) mayHaveSent(err error) bool {
	switch {
	case p == nil || !p.sending:
		return false
	case p.gotConn.Load():
		return true
	case p.getConn.Load():
		return false
	}
	var op *net.OpError
	return !errors.As(err, &op) || op.Op != "dial"
}

// retryAfterSend reports whether an answer to a NoRetryAfterSend call
// tells that the broker did not apply the request, so that it can be sent
// again: 429 (admission budget full, proxy rate limits) and 503 (2.x: no
// leader, leader changed, timeout), unless the 503's code is
// "outcome_unknown". An unreadable body (ok false) is not trusted.
func retryAfterSend(status int, body []byte, ok bool) bool {
	switch {
	case status == http.StatusTooManyRequests:
		return true
	case status != http.StatusServiceUnavailable || !ok:
		return false
	}
	var eb wire.ErrorBody
	return json.Unmarshal(body, &eb) != nil || eb.Code != wire.CodeOutcomeUnknown
}

// checkRetry is the retryablehttp.CheckRetry hook, called once after each
// attempt. It records the URL's health, decides whether to try again and,
// if so, how long to wait first.
func (c *call) checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	c.attempts++
	probe := c.probe
	c.probe = nil
	once := c.req.NoRetryAfterSend
	var body []byte
	bodyOK := false
	if resp != nil {
		// Keep the answer: if later attempts get none, it is still what Do
		// returns.
		if body, bodyOK = c.takeBody(resp); bodyOK {
			c.answer = &Response{Status: resp.StatusCode, Header: resp.Header, Body: body, URL: c.base, Attempts: c.attempts}
		}
	}
	if once && err != nil && probe.mayHaveSent(err) {
		c.unknown = true
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		if once && err == nil && bodyOK {
			return false, nil // this answer is the outcome: worth more than ctx's error
		}
		return false, ctxErr
	}
	// The client's one rule (see Retryable and RetryableErr).
	var retry bool
	if err != nil {
		retry = RetryableErr(err)
	} else {
		retry = Retryable(resp.StatusCode)
	}

	c.lastErr = err
	if err != nil || (resp.StatusCode >= 500 && Retryable(resp.StatusCode)) {
		if c.t.eps.markDown(c.ep) && len(c.t.eps.urls) > 1 {
			c.event(slog.LevelWarn, "queen transport: broker URL failing, using the next one", resp, err)
		}
	} else {
		c.t.eps.markUp(c.ep)
	}

	switch {
	case c.unknown:
		c.event(slog.LevelDebug, "queen transport: no answer after the request may have been sent, not retrying", resp, err)
		return false, err
	case retry && once && err == nil && !retryAfterSend(resp.StatusCode, body, bodyOK):
		retry = false // the broker may have applied it: the answer is final
	}
	if !retry {
		if err != nil {
			return false, err // not worth retrying; giveUp reports it
		}
		return false, nil // a final answer
	}
	if c.attempts >= c.max {
		// Budget spent: retryablehttp stops here and giveUp hands over the
		// last answer (or error).
		c.event(slog.LevelDebug, "queen transport: attempts spent", resp, err)
		return true, nil
	}
	c.wait = c.t.waitBefore(c.attempts, resp)
	if resp != nil {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < c.wait {
			// The ctx would end while waiting: the answer in hand is worth
			// more to the caller than a bare deadline error.
			c.event(slog.LevelDebug, "queen transport: no time left to retry, returning the answer", resp, err)
			return false, nil
		}
	}
	c.event(slog.LevelDebug, "queen transport: retrying", resp, err, slog.Duration("wait", c.wait))
	return true, nil
}

// takeBody returns the body of resp, which RoundTrip read and kept. It
// reports false when the body could not be read.
func (c *call) takeBody(resp *http.Response) ([]byte, bool) {
	if resp == c.bodyOf {
		body := c.body
		c.body, c.bodyOf = nil, nil
		return body, true
	}
	// Not an answer of RoundTrip (no such path in net/http): read it.
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = http.NoBody
	return body, err == nil
}

// event logs an event of the attempt that got resp or err, with the
// attempt's fields and extra ones. The fields are built only when the
// logger takes the level: nothing is spent on a silent logger.
func (c *call) event(level slog.Level, msg string, resp *http.Response, err error, extra ...any) {
	log := c.t.cfg.Logger
	if !log.Enabled(context.Background(), level) {
		return
	}
	attrs := make([]any, 0, 5+len(extra))
	attrs = append(attrs, slog.String("method", c.req.Method), slog.String("path", c.req.Path),
		slog.String("url", c.base), slog.Int("attempt", c.attempts))
	if err != nil {
		attrs = append(attrs, slog.Any("error", err))
	} else {
		attrs = append(attrs, slog.Int("status", resp.StatusCode))
	}
	log.Log(context.Background(), level, msg, append(attrs, extra...)...)
}

// backoff is the retryablehttp.Backoff hook. It sleeps the wait chosen by
// checkRetry through Config.Sleep under the call's ctx and tells
// retryablehttp to wait no further (its own wait is a bare timer).
func (c *call) backoff(_, _ time.Duration, _ int, _ *http.Response) time.Duration {
	if err := c.t.cfg.Sleep(c.ctx, c.wait); err != nil {
		c.abort = err
	}
	return 0
}

// prepareRetry is the retryablehttp.PrepareRetry hook, run before every
// attempt but the first: it stops on a ctx that ended during the wait and
// points the request at the URL the attempt should use.
func (c *call) prepareRetry(req *http.Request) error {
	if c.abort != nil {
		return c.abort
	}
	if err := c.ctx.Err(); err != nil {
		return err
	}
	ep, base := c.t.eps.pick()
	u, err := url.Parse(c.url(base))
	if err != nil {
		c.abort = err
		return err
	}
	if log := c.t.cfg.Logger; ep != c.ep && log.Enabled(context.Background(), slog.LevelDebug) {
		log.Debug("queen transport: failing over",
			slog.String("method", c.req.Method), slog.String("path", c.req.Path),
			slog.String("from", c.base), slog.String("to", base))
	}
	c.ep, c.base = ep, base
	req.URL = u
	req.Host = "" // take the host from the URL
	return nil
}

// giveUp is the retryablehttp.ErrorHandler hook, called when the loop ends
// without a clean final answer: the budget is spent, the error is not worth
// retrying, or the ctx ended. Do then picks the last answer (c.answer) or
// reports the error.
func (c *call) giveUp(resp *http.Response, err error, _ int) (*http.Response, error) {
	switch {
	case c.abort != nil:
		err = c.abort
	case c.ctx.Err() != nil:
		err = c.ctx.Err()
	case err == nil && resp != nil:
		return resp, nil // budget spent on an answer: hand it over
	case err == nil:
		err = c.lastErr
	}
	closeBody(resp)
	return nil, err
}

func closeBody(resp *http.Response) {
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
}

// waitBefore returns the wait before the attempt after attempt n (n >= 1)
// that got resp (nil after a network error). See RetryPolicy.
func (t *Transport) waitBefore(n int, resp *http.Response) time.Duration {
	p := t.cfg.Retry
	if resp != nil {
		if ra, ok := parseRetryAfter(resp.Header.Get("Retry-After"), t.now()); ok {
			d := ra + time.Duration(float64(ra)*0.2*t.rand())
			return min(max(d, p.MinBackoff), MaxRetryAfter)
		}
	}
	// Capped exponential: MinBackoff·2^(n-1), at most MaxBackoff.
	d := retryablehttp.DefaultBackoff(p.MinBackoff, p.MaxBackoff, n-1, nil)
	d = time.Duration(float64(d) * (0.8 + 0.4*t.rand()))
	return min(d, p.MaxBackoff)
}

// parseRetryAfter reads a Retry-After value: delay seconds (fractions
// allowed) or an HTTP date, relative to now. Values above MaxRetryAfter
// come back as MaxRetryAfter, dates in the past as zero.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDecimal(v) {
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return 0, false
		}
		if secs >= MaxRetryAfter.Seconds() {
			return MaxRetryAfter, true
		}
		return time.Duration(secs * float64(time.Second)), true
	}
	when, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return min(max(when.Sub(now), 0), MaxRetryAfter), true
}

// isDecimal reports whether s is digits with at most one decimal point.
func isDecimal(s string) bool {
	digits, dots := 0, 0
	for _, r := range s {
		switch {
		case r >= '0' && r <= '9':
			digits++
		case r == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}
