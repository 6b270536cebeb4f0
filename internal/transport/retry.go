package transport

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/queen-go/queen/internal/wire"
)

// checkRetry is the CheckRetry hook, the one classifier, run after each
// attempt. It reads the answer's body within the attempt (an answer cut
// short is a failure of the attempt, under its timeout), reports the
// attempt, records the URL's health and decides: retry what Retryable or
// RetryableErr accept, less, for a NoRetryAfterSend call, what may have
// been sent (mayHaveSent) or applied (MayHaveApplied). Do reads the
// outcome from the call's state: no error is returned.
func (c *call) checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	c.attempts, c.status = c.attempts+1, 0
	var ans *Response
	if resp != nil { // with err too: a redirect the policy refused
		body, rerr := readBody(resp.Body, resp.ContentLength)
		resp.Body.Close()
		resp.Body = http.NoBody
		switch {
		case err == nil && rerr != nil:
			err = fmt.Errorf("reading the answer of %s %s: %w", c.req.Method, resp.Request.URL.Redacted(), rerr)
		case err == nil:
			ans = &Response{Status: resp.StatusCode, Header: resp.Header, Body: body, URL: c.base, Attempts: c.attempts}
			c.answer, c.status = ans, ans.Status
		}
	}
	if err != nil && errors.Is(err, context.DeadlineExceeded) && c.ctx.Err() == nil {
		err = fmt.Errorf("attempt timeout of %s exceeded: %w", c.hc.Timeout, err)
	}
	c.lastErr = err
	c.observe()
	once := c.req.NoRetryAfterSend
	if resp != nil || err == nil || c.mayHaveSent(err) {
		c.sent = true
		if once && err != nil {
			c.unknown = true
		}
		if (ans == nil && err != nil) || (ans != nil && MayHaveApplied(ans.Status, ans.Body)) {
			c.maybes++
		}
	}
	if ans != nil { // counted above when it may have been applied
		c.ansMaybe = MayHaveApplied(ans.Status, ans.Body)
	}
	if ctx.Err() != nil {
		c.final = ans != nil && once // only such a call takes an answer received as ctx ends
		return false, nil
	}
	if err != nil || (ans.Status >= 500 && Retryable(ans.Status)) {
		if c.t.eps.markDown(c.ep) && len(c.t.eps.urls) > 1 {
			c.logEvent(slog.LevelWarn, "queen transport: broker URL failing, using the next one")
		}
	} else {
		c.t.eps.markUp(c.ep)
	}
	var retry bool
	switch {
	case c.unknown:
	case err != nil:
		retry = RetryableErr(err)
	case once: // only the broker's "not applied, ask again later" (PROTOCOL.md §1.1)
		retry = (ans.Status == http.StatusTooManyRequests || ans.Status == http.StatusServiceUnavailable) &&
			!MayHaveApplied(ans.Status, ans.Body)
	default:
		retry = Retryable(ans.Status)
	}
	c.final = ans != nil && !retry
	return retry, nil
}

// backoff is the Backoff hook: Backoff, with the Retry-After of resp. When
// the ctx would end during that wait after an answer, it waits nothing and
// sets stop, so that prepareRetry ends the loop and Do returns the answer.
func (c *call) backoff(lo, hi time.Duration, attempt int, resp *http.Response) time.Duration {
	var ra time.Duration
	if resp != nil {
		ra, _ = ParseRetryAfter(resp.Header.Get("Retry-After"), c.t.now())
	}
	wait := Backoff(lo, hi, attempt, ra)
	if dl, ok := c.ctx.Deadline(); ok && resp != nil && time.Until(dl) < wait {
		c.logEvent(slog.LevelDebug, "queen transport: no time left to retry, returning the answer")
		c.stop, c.final = errNoTime, true
		return 0
	}
	c.logEvent(slog.LevelDebug, "queen transport: retrying", "wait", wait)
	return wait
}

// Backoff, the client's one backoff, returns the wait before retry
// attempt+1 (from 0): lo·2^attempt capped at hi, jittered by ±20 %, capped
// at hi again, and at least a positive retryAfter (the broker's) plus up
// to 20 %, capped at MaxRetryAfter. The transport waits by it between
// attempts (200 ms to 10 s), the consume loop between failures (50 to 200 ms).
func Backoff(lo, hi time.Duration, attempt int, retryAfter time.Duration) time.Duration {
	return backoff(lo, hi, attempt, retryAfter, rand.Float64())
}

// backoff is Backoff with the jitter draw r in [0, 1).
func backoff(lo, hi time.Duration, attempt int, retryAfter time.Duration, r float64) time.Duration {
	d := hi
	if attempt < 62 && lo > 0 && lo <= hi>>min(attempt, 62) {
		d = lo << attempt
	}
	d = min(time.Duration(float64(d)*(0.8+0.4*r)), hi)
	if retryAfter > 0 {
		d = max(d, min(retryAfter+time.Duration(float64(retryAfter)*0.2*r), MaxRetryAfter))
	}
	return d
}

// ParseRetryAfter reads a Retry-After value, the client's one parser:
// delay seconds (fractions allowed) or an HTTP date, relative to now (in
// the past: zero); ok is false for an empty or malformed value. It is not
// capped (Backoff caps the wait).
func ParseRetryAfter(v string, now time.Time) (d time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if strings.Trim(v, "0123456789.") == "" && strings.Count(v, ".") <= 1 && v != "." { // delay seconds
		secs, err := strconv.ParseFloat(v, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return 0, false
		}
		if secs >= math.MaxInt64/float64(time.Second) {
			return math.MaxInt64, true
		}
		return time.Duration(secs * float64(time.Second)), true
	}
	when, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(when.Sub(now), 0), true
}

// MayHaveApplied, the client's one rule for it (PROTOCOL.md §1.1), reports
// whether the broker may have applied a request it answered with status
// and body: yes for a 2xx, the code "outcome_unknown" (a 2.x 503), a 2.x
// follower's 503 "retry" after its forward to the leader failed (see
// forwardFailed) and every 5xx but 501 (no such route), 503 (no leader,
// leader changed, timeout) and 507 (storage full), refused before
// applying; no for 3xx and 4xx. The transport resends a NoRetryAfterSend
// call only after a 429 or 503 it says no to; the client reports a
// refusal it says yes to as ErrOutcomeUnknown.
func MayHaveApplied(status int, body []byte) bool {
	var eb wire.ErrorBody
	switch {
	case status >= 200 && status <= 299:
		return true
	case json.Unmarshal(body, &eb) == nil && (eb.Code == wire.CodeOutcomeUnknown || forwardFailed(status, eb)):
		return true
	case status == http.StatusNotImplemented, status == http.StatusServiceUnavailable, status == http.StatusInsufficientStorage:
		return false
	}
	return status >= 500
}

// forwardFailed reports whether a 503 is a 2.x follower's answer after
// the request it forwarded to the leader got no answer (the leader
// unreachable or too slow): code "retry", the error naming "the leader at
// <address>". The leader may have applied the request.
func forwardFailed(status int, eb wire.ErrorBody) bool {
	return status == http.StatusServiceUnavailable && eb.Code == "retry" && strings.HasPrefix(eb.Error, "the leader at ")
}

// mayHaveSent, the probe, reports whether the current attempt, failed
// with err, may have written its request where a broker could read it:
// the client's one rule for a request without an answer (MayHaveApplied is
// the one for an answer). Not written, so not sent:
//   - net/http asked for a connection (GetConn) and got none (a refused or
//     timed out dial, DNS);
//   - the broker had closed the HTTP/1 connection net/http got before a
//     byte of the request was written (see probe.gotConnection), or net/http
//     says so ("server closed idle connection": its reader saw the close
//     before the request was queued);
//   - net/http got an HTTP/1 connection and never reported the request
//     written (WroteRequest): it writes nothing else, and waits for its
//     writer before it returns an error.
//
// A connection net/http took before the last one in the attempt (it
// takes another after a reused one failed) counts too. Without events
// (the user's RoundTripper) only a dial error says the attempt was not
// sent. Anything else may have been: an error after the request went out
// (EOF, a reset, a timeout) cannot tell a broker that closed before it
// read from one that applied the request and then failed.
func (c *call) mayHaveSent(err error) bool {
	p := &c.probe
	switch {
	case p.earlier.Load():
		return true
	case p.getConn.Load() && !p.gotConn.Load():
		return false
	case p.gotConn.Load() && (p.closed.Load() || isServerClosedIdle(err)):
		return false
	case p.gotConn.Load() && !p.h2.Load():
		return p.wrote.Load()
	case p.wrote.Load():
		return true
	}
	var op *net.OpError
	return !errors.As(err, &op) || op.Op != "dial"
}

// isServerClosedIdle reports net/http's error for a pooled connection its
// reader found closed by the server before a request was queued on it
// (net/http's errServerClosedIdle, known by its text only).
func isServerClosedIdle(err error) bool {
	return err != nil && strings.Contains(err.Error(), "http: server closed idle connection")
}
