package transport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults applied by New to zero fields of Config and RetryPolicy.
const (
	// DefaultIdleConns is the default Config.IdleConns.
	DefaultIdleConns = 32
	// DefaultTimeout is the default Config.Timeout.
	DefaultTimeout = 30 * time.Second
	// DefaultMaxAttempts is the default RetryPolicy.MaxAttempts.
	DefaultMaxAttempts = 4
	// DefaultMinBackoff is the default RetryPolicy.MinBackoff.
	DefaultMinBackoff = 200 * time.Millisecond
	// DefaultMaxBackoff is the default RetryPolicy.MaxBackoff.
	DefaultMaxBackoff = 10 * time.Second
	// DefaultFailoverPause is the default RetryPolicy.FailoverPause.
	DefaultFailoverPause = 5 * time.Second

	// MaxRetryAfter caps how long a single Retry-After header can make a
	// call wait before its next attempt.
	MaxRetryAfter = 60 * time.Second
)

// Config configures a Transport. The zero value of every field except URLs
// selects a default.
type Config struct {
	// URLs are the broker base URLs in failover order (the first healthy
	// one is preferred). Each needs scheme http or https and a host; it may
	// carry a path prefix (e.g. behind a proxy) but no query, fragment or
	// user info. At least one is required.
	URLs []string

	// HTTPClient is the user's own client, used as is for every attempt
	// except that its Timeout is not used: each attempt is bounded by
	// Timeout (or Request.Timeout) instead, through the request's context.
	// When nil, New builds a client with its own pooled transport keeping
	// IdleConns idle connections per host.
	HTTPClient *http.Client

	// IdleConns is how many idle connections per host the built pool keeps
	// (each concurrent long poll holds one). Default DefaultIdleConns.
	// Ignored when HTTPClient is set.
	IdleConns int

	// BearerToken, when set, is sent as "Authorization: Bearer <token>" on
	// every request.
	BearerToken string

	// Timeout bounds one attempt of an ordinary call, from dialling to the
	// last byte of the answer. Request.Timeout overrides it per request.
	// Default DefaultTimeout.
	Timeout time.Duration

	// Retry is the retry and failover policy.
	Retry RetryPolicy

	// Logger receives retry and failover events (Debug and Warn). Nil
	// means silent.
	Logger *slog.Logger

	// UserAgent, when set, is sent as the User-Agent header.
	UserAgent string

	// Sleep waits between attempts. It must return early with ctx.Err()
	// when ctx ends. Nil selects a timer-based sleep; tests inject their
	// own.
	Sleep func(ctx context.Context, d time.Duration) error

	// Rand returns a number in [0, 1) used for jitter. It must be safe for
	// concurrent use. Nil selects math/rand/v2.
	Rand func() float64

	// OnAttempt, when set, is called after every attempt (every HTTP
	// exchange, redirect hops included), on the goroutine of the call,
	// with the call's ctx. Nil costs nothing.
	OnAttempt func(ctx context.Context, a Attempt)
}

// Attempt describes one HTTP exchange of a call, for Config.OnAttempt.
type Attempt struct {
	Method string
	// Path is the request's escaped path.
	Path string
	// URL is the base URL the attempt went to.
	URL string
	// Number counts the attempts of the call, from 1.
	Number int
	// Status is the HTTP status of the answer, 0 when there was none.
	Status int
	// Duration is from handing the request to the connection pool to the
	// last byte of the answer (or the failure).
	Duration time.Duration
	// Err is the attempt's network failure, nil when an answer came.
	Err error
}

// RetryPolicy says how often and how patiently a call is retried and how
// long a failing URL is avoided.
//
// The wait before retry n (n = 1, 2, ...) is MinBackoff·2^(n-1), capped at
// MaxBackoff, then jittered by ±20 % and capped at MaxBackoff again. When
// the answer carries a Retry-After header, the wait is that value plus up
// to 20 % jitter (never less than what the broker asked), capped at
// MaxRetryAfter.
type RetryPolicy struct {
	// MaxAttempts is the total number of attempts of a call, the first
	// included, long polls included. Default DefaultMaxAttempts.
	MaxAttempts int

	// MinBackoff is the wait before the first retry. Default
	// DefaultMinBackoff.
	MinBackoff time.Duration

	// MaxBackoff caps the exponential wait. Default DefaultMaxBackoff.
	MaxBackoff time.Duration

	// FailoverPause is how long a URL that failed (network error or 5xx)
	// is skipped before it is tried again. Default DefaultFailoverPause.
	FailoverPause time.Duration
}

// withDefaults validates cfg and returns a copy with defaults filled in.
func (cfg Config) withDefaults() (Config, error) {
	if len(cfg.URLs) == 0 {
		return cfg, errors.New("transport: no broker URL")
	}
	if cfg.IdleConns < 0 || cfg.Timeout < 0 {
		return cfg, fmt.Errorf("transport: negative IdleConns (%d) or Timeout (%s)", cfg.IdleConns, cfg.Timeout)
	}
	if cfg.IdleConns == 0 {
		cfg.IdleConns = DefaultIdleConns
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	p := &cfg.Retry
	if p.MaxAttempts < 0 || p.MinBackoff < 0 || p.MaxBackoff < 0 || p.FailoverPause < 0 {
		return cfg, fmt.Errorf("transport: negative value in retry policy %+v", *p)
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.MinBackoff == 0 {
		p.MinBackoff = DefaultMinBackoff
	}
	if p.MaxBackoff == 0 {
		p.MaxBackoff = max(DefaultMaxBackoff, p.MinBackoff)
	}
	if p.MinBackoff > p.MaxBackoff {
		return cfg, fmt.Errorf("transport: MinBackoff %s above MaxBackoff %s", p.MinBackoff, p.MaxBackoff)
	}
	if p.FailoverPause == 0 {
		p.FailoverPause = DefaultFailoverPause
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleepCtx
	}
	return cfg, nil
}

// parseBaseURL checks one broker base URL and returns it without a
// trailing slash, ready to have a request path appended.
func parseBaseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("transport: broker URL %q: %w", raw, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("transport: broker URL %q: scheme must be http or https", raw)
	case u.Host == "":
		return "", fmt.Errorf("transport: broker URL %q: no host", raw)
	case u.User != nil:
		return "", fmt.Errorf("transport: broker URL %q: user info not allowed (use a bearer token)", raw)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return "", fmt.Errorf("transport: broker URL %q: query or fragment not allowed", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// sleepCtx waits d or until ctx ends, whichever comes first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-tm.C:
		return nil
	}
}
