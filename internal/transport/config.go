package transport

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults applied by New to zero fields of Config and RetryPolicy, and
// MaxRetryAfter, the longest wait a Retry-After can ask for (see Backoff).
const (
	DefaultIdleConns     = 32
	DefaultTimeout       = 30 * time.Second
	DefaultMaxAttempts   = 4
	DefaultMinBackoff    = 200 * time.Millisecond
	DefaultMaxBackoff    = 10 * time.Second
	DefaultFailoverPause = 5 * time.Second
	MaxRetryAfter        = 60 * time.Second
)

// Config configures a Transport. The zero value of every field except URLs
// selects a default.
type Config struct {
	// URLs are the broker base URLs, in failover order under the Failover
	// balance: http or https, a host, maybe a path prefix (a
	// proxy's), no query, fragment or user info. At least one.
	URLs []string
	// HTTPClient is the user's own client, used for every attempt (its
	// redirect policy and jar included) but its Timeout (each attempt is
	// bounded by Timeout or Request.Timeout instead); its RoundTripper's
	// CloseIdleConnections is never called. When nil, New builds a client
	// on a pool of its own keeping IdleConns idle connections per host.
	HTTPClient *http.Client
	// IdleConns is how many idle connections per host the built pool keeps
	// (each concurrent long poll holds one). Default DefaultIdleConns.
	IdleConns int
	// BearerToken, when set, is sent as "Authorization: Bearer <token>".
	BearerToken string
	// Timeout bounds one attempt, from dialling to the last byte of the
	// answer, redirects included. Default DefaultTimeout.
	Timeout time.Duration
	// Balance is how calls spread over URLs. Default Failover.
	Balance Balance
	// Retry is the retry and failover policy.
	Retry RetryPolicy
	// Logger receives retry and failover events (Debug, Warn); nil: none.
	Logger *slog.Logger
	// UserAgent, when set, is sent as the User-Agent header.
	UserAgent string
	// OnAttempt, when set, is called after every attempt (redirects are
	// part of it), on the call's goroutine with the call's ctx.
	OnAttempt func(ctx context.Context, a Attempt)
}

// Attempt describes one attempt of a call, for Config.OnAttempt: the
// request's method and escaped path, the base URL it went to, its number
// (from 1), the answer's status (0 without one: Err is then the failure)
// and its duration, from its start to the last byte of the answer.
type Attempt struct {
	Method, Path, URL string
	Number, Status    int
	Duration          time.Duration
	Err               error
}

// RetryPolicy says how often and how patiently a call is retried, and how
// long a failing URL is avoided. Before each retry the call waits
// Backoff(MinBackoff, MaxBackoff, ...) with the answer's Retry-After.
type RetryPolicy struct {
	// MaxAttempts is the total number of attempts of a call, the first and
	// long polls included. Default DefaultMaxAttempts.
	MaxAttempts int
	// MinBackoff and MaxBackoff bound the exponential wait. Defaults
	// DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
	// FailoverPause is how long a URL that failed (network error or 5xx)
	// is skipped. Default DefaultFailoverPause.
	FailoverPause time.Duration
}

// withDefaults validates cfg and returns a copy with defaults filled in.
func (cfg Config) withDefaults() (Config, error) {
	p := &cfg.Retry
	switch {
	case len(cfg.URLs) == 0:
		return cfg, errors.New("transport: no broker URL")
	case cfg.Balance < Failover || cfg.Balance > Affinity:
		return cfg, fmt.Errorf("transport: unknown balance %d", cfg.Balance)
	case cfg.IdleConns < 0 || cfg.Timeout < 0 || p.MaxAttempts < 0 || p.MinBackoff < 0 || p.MaxBackoff < 0 || p.FailoverPause < 0:
		return cfg, fmt.Errorf("transport: negative IdleConns (%d), Timeout (%s) or value in retry policy %+v", cfg.IdleConns, cfg.Timeout, *p)
	}
	cfg.IdleConns = cmp.Or(cfg.IdleConns, DefaultIdleConns)
	cfg.Timeout = cmp.Or(cfg.Timeout, DefaultTimeout)
	p.MaxAttempts = cmp.Or(p.MaxAttempts, DefaultMaxAttempts)
	p.MinBackoff = cmp.Or(p.MinBackoff, DefaultMinBackoff)
	p.MaxBackoff = cmp.Or(p.MaxBackoff, max(DefaultMaxBackoff, p.MinBackoff))
	p.FailoverPause = cmp.Or(p.FailoverPause, DefaultFailoverPause)
	if p.MinBackoff > p.MaxBackoff {
		return cfg, fmt.Errorf("transport: MinBackoff %s above MaxBackoff %s", p.MinBackoff, p.MaxBackoff)
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return cfg, nil
}

// parseBaseURLs checks the base URLs of Config.URLs.
func parseBaseURLs(urls []string) ([]string, error) {
	bases := make([]string, len(urls))
	for i, raw := range urls {
		var err error
		if bases[i], err = parseBaseURL(raw); err != nil {
			return nil, err
		}
	}
	return bases, nil
}

// parseBaseURL checks a base URL (the client checks it in full).
func parseBaseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "", fmt.Errorf("transport: broker URL %q: want http(s)://host[:port][/prefix], no user info, query or fragment", raw)
	}
	return strings.TrimRight(u.String(), "/"), nil
}
