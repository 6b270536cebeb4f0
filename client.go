package queen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/queen-go/queen/internal/transport"
	"github.com/queen-go/queen/internal/wire"
)

// Client talks to one Queen broker (or several URLs of one cluster, with
// failover). It is safe for concurrent use. Create it with New and release it
// with Close.
type Client struct {
	tr    *transport.Transport
	log   *slog.Logger
	hooks *hookSet // nil without WithHooks
	cfg   config
	mem   brokerMemory // what the broker's answers taught (subscription.go)

	mu         sync.Mutex
	closed     bool
	inflight   int           // calls in do
	drained    chan struct{} // closed once closed and no call is in flight
	minRenewMs int           // MinRenewMillis; lowered only by export_test.go
}

type config struct {
	urls           []string
	token          string
	httpClient     *http.Client
	logger         *slog.Logger
	requestTimeout time.Duration
	retry          RetryPolicy
	idleConns      int
	hooks          []Hook
	balancing      LoadBalancing
	balancingSet   bool
}

// RetryPolicy says how the client retries transient failures (the rule of
// BrokerError.Temporary); a pop, a commit and a DLQ replay only when the
// broker surely did not get them. Every call makes at most MaxAttempts
// attempts (a Producer's batches: WithDeliveryTimeout), waiting MinBackoff
// doubling to MaxBackoff, ±20 %, at least a Retry-After. Zero fields take
// their defaults. See docs/RETRIES.md, "The transport".
type RetryPolicy struct {
	// MaxAttempts counts the first attempt too (default 4).
	MaxAttempts int
	// MinBackoff and MaxBackoff: defaults 200 ms and 10 s.
	MinBackoff, MaxBackoff time.Duration
	// FailoverPause is how long a failed broker URL is skipped (default 5 s).
	FailoverPause time.Duration
}

// Option configures a Client.
type Option func(*config)

// WithURLs adds more broker URLs of one cluster (0.15.1 brokers over one
// PostgreSQL, or 2.x nodes): calls spread over them (WithLoadBalancing) and
// fail over when one is down.
func WithURLs(urls ...string) Option {
	return func(c *config) { c.urls = append(c.urls, urls...) }
}

// WithBearerToken sends "Authorization: Bearer <token>" on every request.
func WithBearerToken(token string) Option {
	return func(c *config) { c.token = token }
}

// WithHTTPClient sends the requests with hc. Its Timeout is not used
// (WithRequestTimeout is), and the client never closes its connections.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) { c.httpClient = hc }
}

// WithLogger sets the logger of the client's records: Error (a handler
// panic, an ack failed for good), Warn (a retried pop or ack, a failing
// URL), Info and Debug (retried attempts). Without it, Warn and above go to
// slog.Default() as of New; slog.DiscardHandler silences the client.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// warnHandler: the logger of a client made without WithLogger.
type warnHandler struct{ h slog.Handler }

func (w warnHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.h.Enabled(ctx, l)
}

func (w warnHandler) Handle(ctx context.Context, r slog.Record) error { return w.h.Handle(ctx, r) }

func (w warnHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return warnHandler{w.h.WithAttrs(attrs)}
}

func (w warnHandler) WithGroup(name string) slog.Handler { return warnHandler{w.h.WithGroup(name)} }

// WithRequestTimeout bounds each attempt, dial to last byte (default
// 30 s); a long poll gets its wait plus 5 s instead.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) { c.requestTimeout = d }
}

// WithRetryPolicy sets how transient failures are retried.
func WithRetryPolicy(p RetryPolicy) Option {
	return func(c *config) { c.retry = p }
}

// WithIdleConns sets the idle keep-alive connections kept per host
// (default 32; at least the concurrent long polls). Ignored with
// WithHTTPClient.
func WithIdleConns(n int) Option {
	return func(c *config) { c.idleConns = n }
}

// New returns a client for the broker at rawURL, such as
// "http://localhost:6632", or a proxy's prefix ("http://gw/queen"; the
// client adds /api/v1). A URL that is not a clean absolute http(s) URL
// (space, no host, a query, fragment or user info, an empty, "." or ".."
// segment, a path ending in /api/v1) fails with ErrInvalidURL. Nothing is
// sent until the first call.
func New(rawURL string, opts ...Option) (*Client, error) {
	cfg := config{urls: []string{rawURL}}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	urls := make([]string, 0, len(cfg.urls))
	for _, u := range cfg.urls {
		norm, err := normalizeURL(u)
		if err != nil {
			return nil, err
		}
		urls = append(urls, norm)
	}
	cfg.urls = urls
	if cfg.requestTimeout < 0 {
		return nil, fmt.Errorf("%w: negative request timeout", ErrInvalidOption)
	}
	if cfg.idleConns < 0 {
		return nil, fmt.Errorf("%w: negative idle connection count", ErrInvalidOption)
	}
	log := cfg.logger
	if log == nil {
		log = slog.New(warnHandler{slog.Default().Handler()})
	}
	hooks, err := newHookSet(cfg.hooks, log)
	if err != nil {
		return nil, err
	}
	balance, err := cfg.balance()
	if err != nil {
		return nil, err
	}
	tr, err := transport.New(transport.Config{
		URLs:        cfg.urls,
		HTTPClient:  cfg.httpClient,
		IdleConns:   cfg.idleConns,
		BearerToken: cfg.token,
		Timeout:     cfg.requestTimeout,
		Balance:     balance,
		Retry: transport.RetryPolicy{
			MaxAttempts:   cfg.retry.MaxAttempts,
			MinBackoff:    cfg.retry.MinBackoff,
			MaxBackoff:    cfg.retry.MaxBackoff,
			FailoverPause: cfg.retry.FailoverPause,
		},
		Logger:    log,
		UserAgent: "queen-go",
		OnAttempt: hooks.onAttempt(),
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidOption, err)
	}
	return &Client{tr: tr, log: log, hooks: hooks, cfg: cfg, drained: make(chan struct{}), minRenewMs: MinRenewMillis}, nil
}

const apiPath = wire.APIPrefix

func normalizeURL(raw string) (string, error) {
	if strings.TrimSpace(raw) != raw || strings.ContainsFunc(raw, unicode.IsControl) {
		// url.Parse keeps a leading space in the scheme's place or a
		// trailing one in the path; such a URL is a typo, not an address.
		return "", fmt.Errorf("%w %q: white space or control characters around or in the URL", ErrInvalidURL, raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("%w %q: %v", ErrInvalidURL, raw, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%w %q: want http(s)://host[:port]", ErrInvalidURL, raw)
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return "", fmt.Errorf("%w %q: no query or fragment allowed", ErrInvalidURL, raw)
	}
	if u.User != nil {
		return "", fmt.Errorf("%w: user info in the URL is not allowed; use WithBearerToken", ErrInvalidURL)
	}
	if p := strings.TrimSuffix(u.Path, "/"); p != "" && path.Clean(p) != p {
		// A base path such as /a/../b or //b means another path once a
		// server or proxy cleans it.
		return "", fmt.Errorf("%w %q: the path has empty, \".\" or \"..\" segments", ErrInvalidURL, raw)
	}
	if p := strings.TrimSuffix(u.Path, "/"); strings.HasSuffix(p, apiPath) {
		return "", fmt.Errorf("%w %q: the path ends in %s, which the client adds to every request; give the base URL %q",
			ErrInvalidURL, raw, apiPath, strings.TrimSuffix(strings.TrimSuffix(raw, "/"), apiPath))
	}
	return strings.TrimRight(u.String(), "/"), nil
}

// Close makes later calls fail with ErrClosed (and ErrNotSent), waits for
// the calls in flight, closes its idle connections and returns nil. A Pop
// waiting for messages (a long poll) is a call in flight: Close waits
// until it returns, with what it got or at its TimeoutMillis, so that no
// message is leased to a caller that never sees it; cancel the Pop's own
// ctx to end it sooner. When ctx ends first, Close returns ctx.Err() and
// the calls go on to their end (the last one out closes the connections).
// Stop consume loops and producers first. Safe to call more than once.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	idle := false
	if !c.closed {
		c.closed = true
		if c.inflight == 0 {
			close(c.drained)
			idle = true
		}
	}
	c.mu.Unlock()
	if idle {
		c.tr.Close()
	}
	select {
	case <-c.drained:
		return nil
	default:
	}
	select {
	case <-c.drained:
		return nil
	case <-ctx.Done():
		c.tr.Close()
		return ctx.Err()
	}
}

func (c *Client) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.inflight++
	return true
}

// leave: the last call out of a closed client closes the idle
// connections and wakes Close.
func (c *Client) leave() {
	c.mu.Lock()
	c.inflight--
	last := c.closed && c.inflight == 0
	if last {
		close(c.drained)
	}
	c.mu.Unlock()
	if last {
		c.tr.Close()
	}
}

type call struct {
	method string
	path   string // escaped path
	query  url.Values
	// rawQuery is used when query is empty (a pop's, encoded once).
	rawQuery string
	body     any // marshalled to JSON when non-nil
	raw      []byte
	timeout  time.Duration
	// attempts, when positive, overrides MaxAttempts (the consume loop's
	// pops: one).
	attempts int
	// once: never retried once it may have reached the broker (a pop, a
	// transaction, a DLQ replay); an open outcome is ErrOutcomeUnknown.
	once bool
	// key is the routing key under Affinity (balance.go); empty: any URL.
	key string
}

type response struct {
	status int
	header http.Header
	body   []byte
	url    string // the URL requested: base URL and path
	// maybe: another attempt of the call than the one answered may have
	// been applied (transport.Response.OtherMayHaveApplied).
	maybe bool
}

// do returns a 2xx answer as is and makes any other a *BrokerError, which
// matches ErrOutcomeUnknown when the request may have been applied all the
// same: by this attempt (transport.MayHaveApplied: a 500, say) or by
// another one (response.maybe). A 2xx the caller reads as a refusal, or
// cannot read, answers through response.answered or response.unreadable.
func (c *Client) do(ctx context.Context, r call) (*response, error) {
	if !c.enter() {
		return nil, &notSentError{ErrClosed} // ErrNotSent, and ErrClosed through Unwrap
	}
	defer c.leave()
	body := r.raw
	if r.body != nil && body == nil {
		var err error
		body, err = json.Marshal(r.body)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalidPayload, err)
		}
	}
	resp, err := c.tr.Do(ctx, transport.Request{
		Method:   r.method,
		Path:     r.path,
		Query:    r.query,
		RawQuery: r.rawQuery,
		Body:     body,
		Timeout:  r.timeout,
		Attempts: r.attempts,

		NoRetryAfterSend: r.once,
		Key:              r.key,
	})
	if err != nil {
		err = fmt.Errorf("queen: %w", err) // the transport names the method and URL
		switch {
		case errors.Is(err, transport.ErrOutcomeUnknown):
			err = outcomeUnknown(err)
		case errors.Is(err, transport.ErrNotSent):
			err = &notSentError{err}
		}
		return nil, err
	}
	out := &response{status: resp.Status, header: resp.Header, body: resp.Body, url: resp.URL + r.path, maybe: resp.OtherMayHaveApplied}
	if resp.Status < 200 || resp.Status > 299 {
		be := brokerError(r.method, r.path, out)
		be.Attempts = resp.Attempts
		if resp.OtherMayHaveApplied || transport.MayHaveApplied(resp.Status, resp.Body) {
			return out, outcomeUnknown(be)
		}
		return out, be
	}
	return out, nil
}

// doJSON decodes a 2xx JSON answer into out, if any.
func (c *Client) doJSON(ctx context.Context, r call, out any) (*response, error) {
	resp, err := c.do(ctx, r)
	if err != nil {
		return resp, err
	}
	return resp, decodeAnswer(resp, r, out)
}

// decodeAnswer: a body that does not decode is unreadable.
func decodeAnswer(resp *response, r call, out any) error {
	if out != nil && len(bytes.TrimSpace(resp.body)) > 0 {
		if err := json.Unmarshal(resp.body, out); err != nil {
			return resp.unreadable(r.method, r.path, "undecodable answer: "+err.Error())
		}
	}
	return nil
}

// refusal is a 2xx answer that says the broker did not do the request: a
// *BrokerError, which matches ErrOutcomeUnknown when another attempt may
// have been applied (see answered).
func (resp *response) refusal(method, path, msg string) error {
	return resp.answered(&BrokerError{Status: resp.status, Method: method, Path: path, URL: resp.url, Body: resp.body, Message: msg})
}

// answered is err, the refusal a 2xx answer reads as (a *BrokerError, an
// *AckError, a *PushError), made to match ErrOutcomeUnknown when another
// attempt of the call may have been applied: that attempt, not this
// refusal, may be what the broker did.
func (resp *response) answered(err error) error {
	if err == nil || !resp.maybe || errors.Is(err, ErrOutcomeUnknown) {
		return err
	}
	return outcomeUnknown(err)
}

// unreadable is a 2xx answer the client cannot read: the broker applied
// the request, but what came of it is unknown. It matches
// ErrOutcomeUnknown and unwraps to a *BrokerError that says why.
func (resp *response) unreadable(method, path, msg string) error {
	return outcomeUnknown(&BrokerError{Status: resp.status, Method: method, Path: path, URL: resp.url, Body: resp.body, Message: msg})
}

// doObject is doJSON for routes whose success is never an error envelope:
// 0.15.1 answers some failures 200 {"error":"..."}, made a *BrokerError.
func (c *Client) doObject(ctx context.Context, r call, out any) (*response, error) {
	resp, err := c.do(ctx, r)
	if err != nil {
		return resp, err
	}
	if be := errorObject(resp, r.method, r.path); be != nil {
		return resp, resp.answered(be)
	}
	return resp, decodeAnswer(resp, r, out)
}

// errorObject: an object with a non-empty "error" and no true "success".
func errorObject(resp *response, method, path string) *BrokerError {
	body := bytes.TrimSpace(resp.body)
	if len(body) == 0 || body[0] != '{' {
		return nil
	}
	var eb wire.ErrorBody
	if json.Unmarshal(body, &eb) != nil || eb.Error == "" || (eb.Success != nil && *eb.Success) {
		return nil
	}
	return &BrokerError{Status: resp.status, Method: method, Path: path, URL: resp.url, Body: resp.body, Code: eb.Code, Message: eb.Error}
}

// brokerError: the envelope's code and message, or else an excerpt of the
// body (a proxy's HTML page, say).
func brokerError(method, path string, resp *response) *BrokerError {
	e := &BrokerError{Status: resp.status, Method: method, Path: path, URL: resp.url, Body: resp.body,
		ContentType: resp.header.Get("Content-Type")}
	var eb wire.ErrorBody
	if json.Unmarshal(resp.body, &eb) == nil && (eb.Error != "" || eb.Code != "") {
		e.Code, e.Message = eb.Code, eb.Error
	} else {
		e.Message = excerpt(resp.body)
	}
	if e.Message == "" {
		e.Message = http.StatusText(resp.status)
	}
	e.RetryAfter, _ = transport.ParseRetryAfter(resp.header.Get("Retry-After"), time.Now())
	return e
}

const excerptLen = 200

// excerpt returns the start of body as one line, "…" when cut.
func excerpt(body []byte) string {
	var b strings.Builder
	space := false
	for _, r := range strings.ToValidUTF8(string(body[:min(len(body), 4*excerptLen)]), "") {
		switch {
		case unicode.IsSpace(r):
			space = b.Len() > 0
			continue
		case unicode.IsControl(r):
			continue
		}
		if b.Len() >= excerptLen {
			return b.String() + "…"
		}
		if space {
			b.WriteByte(' ')
			space = false
		}
		b.WriteRune(r)
	}
	if len(body) > 4*excerptLen {
		return b.String() + "…"
	}
	return b.String()
}
