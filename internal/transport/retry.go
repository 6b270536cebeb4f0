package transport

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-retryablehttp"
)

// call is the state of one Do: the hooks given to retryablehttp share it.
// retryablehttp runs the hooks of one call sequentially, so no lock.
type call struct {
	t      *Transport
	ctx    context.Context
	req    Request
	suffix string // escaped path and query, appended to a base URL

	ep   int    // index of the URL of the current attempt
	base string // its base URL

	max      int           // attempt budget; 0 = until ctx ends (long poll)
	attempts int           // attempts made so far
	wait     time.Duration // wait before the next attempt
	lastErr  error         // network error of the last attempt, if any
	answer   *Response     // the last answer received, if any
	abort    error         // set when Sleep or URL rewriting failed: stop the loop
}

// checkRetry is the retryablehttp.CheckRetry hook, called once after each
// attempt. It records the URL's health, decides whether to try again and,
// if so, how long to wait first.
func (c *call) checkRetry(ctx context.Context, resp *http.Response, err error) (bool, error) {
	c.attempts++
	if ctxErr := ctx.Err(); ctxErr != nil {
		return false, ctxErr
	}
	// retryablehttp's classification: network errors (except redirect
	// loops, bad scheme, bad header, untrusted certificate), 429 and 5xx
	// except 501 are worth another attempt.
	retry, classErr := retryablehttp.ErrorPropagatedRetryPolicy(ctx, resp, err)

	log := c.t.cfg.Logger
	attrs := []any{slog.String("method", c.req.Method), slog.String("path", c.req.Path),
		slog.String("url", c.base), slog.Int("attempt", c.attempts)}
	if err != nil {
		attrs = append(attrs, slog.Any("error", err))
	} else {
		attrs = append(attrs, slog.Int("status", resp.StatusCode))
	}

	c.lastErr = err
	if resp != nil {
		// Keep the answer: if later attempts get none, it is still what Do
		// returns. The body is already in memory (bufferingRT); put a fresh
		// reader back for retryablehttp to drain or hand over.
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		if rerr == nil {
			c.answer = &Response{Status: resp.StatusCode, Header: resp.Header, Body: body, URL: c.base}
		}
	}
	if err != nil || (resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented) {
		if c.t.eps.markDown(c.ep) && len(c.t.eps.urls) > 1 {
			log.Warn("queen transport: broker URL failing, using the next one", attrs...)
		}
	} else {
		c.t.eps.markUp(c.ep)
	}

	if !retry {
		if err != nil {
			return false, classErr // not worth retrying; giveUp reports it
		}
		return false, nil // a final answer
	}
	if c.max > 0 && c.attempts >= c.max {
		// Budget spent: retryablehttp stops here and giveUp hands over the
		// last answer (or error).
		log.Debug("queen transport: attempts spent", attrs...)
		return true, nil
	}
	c.wait = c.t.waitBefore(c.attempts, resp)
	if resp != nil {
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < c.wait {
			// The ctx would end while waiting: the answer in hand is worth
			// more to the caller than a bare deadline error.
			log.Debug("queen transport: no time left to retry, returning the answer", attrs...)
			return false, nil
		}
	}
	log.Debug("queen transport: retrying", append(attrs, slog.Duration("wait", c.wait))...)
	return true, nil
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
	u, err := url.Parse(base + c.suffix)
	if err != nil {
		c.abort = err
		return err
	}
	if ep != c.ep {
		c.t.cfg.Logger.Debug("queen transport: failing over",
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
