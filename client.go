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

	mu       sync.Mutex
	closed   bool
	inflight int           // calls in do
	drained  chan struct{} // closed once closed and no call is in flight
	// minRenewMs is the shortest RenewLease interval a consume loop takes:
	// MinRenewMillis, lowered only by the package's tests (export_test.go).
	minRenewMs int
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

// RetryPolicy says how the client retries transient failures: network
// errors and the answers 408, 429 and 5xx except 501, 505, 506, 508, 510
// and 511 (the same rule as BrokerError.Temporary). Calls that must not
// be applied twice (a pop, a transaction commit, a dead-letter replay) are
// retried only when the broker surely did not get or serve them (see
// ErrOutcomeUnknown). Zero fields take their defaults.
//
// Every call, a waiting pop included, makes at most MaxAttempts attempts
// (a Producer's batches are sent again until WithDeliveryTimeout instead);
// the waits between them grow from MinBackoff, doubling, capped at
// MaxBackoff, jittered by ±20 %, and are at least a Retry-After the broker
// sent (plus up to 20 %, at most 60 s). With the defaults a call against a
// broker that refuses connections fails after 3 waits of about 200, 400
// and 800 ms: 1.1 s to 1.7 s in all. The error then says how many
// attempts were made. Each attempt is bounded by WithRequestTimeout (a
// waiting pop: its wait plus 5 s).
type RetryPolicy struct {
	// MaxAttempts bounds the attempts of every call, the first included
	// (default 4).
	MaxAttempts int
	// MinBackoff and MaxBackoff bound the capped exponential backoff
	// (defaults 200 ms and 10 s); jitter is added. A Retry-After from the
	// broker is honoured.
	MinBackoff, MaxBackoff time.Duration
	// FailoverPause is how long a broker URL that failed is skipped before it
	// is tried again (default 5 s).
	FailoverPause time.Duration
}

// Option configures a Client.
type Option func(*config)

// WithURLs adds more broker URLs of one cluster: 0.15.1 brokers over one
// PostgreSQL, or the nodes of a 2.x cluster. The client spreads its calls
// over them (see WithLoadBalancing), fails over when one is down, and
// tries a failed one again after a pause.
func WithURLs(urls ...string) Option {
	return func(c *config) { c.urls = append(c.urls, urls...) }
}

// WithBearerToken sends "Authorization: Bearer <token>" on every request.
func WithBearerToken(token string) Option {
	return func(c *config) { c.token = token }
}

// WithHTTPClient makes the client send its requests with hc, its
// RoundTripper, redirect policy and cookie jar. Its Timeout is not used:
// each attempt is bounded by WithRequestTimeout (a waiting pop by its wait
// plus a margin). The client never closes hc's idle connections.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *config) { c.httpClient = hc }
}

// WithLogger sets the logger that receives all of the client's records:
// Error (a handler panic, an ack that failed for good), Warn (a pop or
// an ack that failed and is retried, a failing broker URL), Info and
// Debug (each retried attempt of a request).
//
// Without WithLogger, the Warn and Error records go to slog.Default() as
// it is when New runs, and Info and Debug are dropped: a failing worker
// is never silent. WithLogger(slog.New(slog.DiscardHandler)) silences the
// client.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// warnHandler passes the records of level Warn and above to h and drops
// the others: the logger of a client made without WithLogger.
type warnHandler struct{ h slog.Handler }

func (w warnHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.h.Enabled(ctx, l)
}

func (w warnHandler) Handle(ctx context.Context, r slog.Record) error { return w.h.Handle(ctx, r) }

func (w warnHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return warnHandler{w.h.WithAttrs(attrs)}
}

func (w warnHandler) WithGroup(name string) slog.Handler { return warnHandler{w.h.WithGroup(name)} }

// WithRequestTimeout bounds each attempt of an ordinary call, from dialling
// to the last byte of the answer, redirects included (default 30 s). A
// long-polling pop gets its wait plus a margin instead.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *config) { c.requestTimeout = d }
}

// WithRetryPolicy sets how transient failures are retried.
func WithRetryPolicy(p RetryPolicy) Option {
	return func(c *config) { c.retry = p }
}

// WithIdleConns sets how many idle keep-alive connections per host the
// client keeps (default 32). Each long poll holds one: keep it at least the
// number of concurrent consumers. Ignored with WithHTTPClient.
func WithIdleConns(n int) Option {
	return func(c *config) { c.idleConns = n }
}

// New returns a client for the broker at rawURL (for example
// "http://localhost:6632"). The URL may carry the path prefix of a proxy
// in front of the broker ("http://gw/queen": requests go to
// http://gw/queen/api/v1/...), but not the API's own path: the client adds
// /api/v1 itself, so a URL whose path ends in /api/v1 is refused. A URL
// that is not a clean absolute http(s) URL (one with surrounding white
// space or control characters, no host, a query, a fragment or user info,
// a path with empty, "." or ".." segments, or ending in /api/v1) is an
// error matching ErrInvalidURL; nothing is sent until the first call.
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

// apiPath is the path of the broker's API, which every request path
// starts with (a base URL may not end with it).
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

// Close stops the client: calls made after it fail with ErrClosed. It
// waits for the calls in flight to end, then closes the idle connections
// of the client's pool (WithHTTPClient's client is left alone), and
// returns nil. When ctx ends first, it closes the connections that are
// idle then and returns ctx.Err(); the calls still in flight go on, and
// the last of them closes the rest of the pool. A consume loop should be
// stopped (its Execute returned) before Close: its next request fails
// with ErrClosed otherwise, which ends it. The client starts no goroutine
// of its own, so none is left running. Close is safe to call more than
// once; each call waits as the first one does.
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

// enter admits a call unless the client is closed; leave ends it.
func (c *Client) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.inflight++
	return true
}

// leave ends a call that enter admitted. The last call out of a closed
// client closes the pool's idle connections and wakes Close.
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

// call is one request for do.
type call struct {
	method string
	path   string // escaped path
	query  url.Values
	// rawQuery is the query already encoded, used when query is empty (a
	// pop's, encoded once per popRequest).
	rawQuery string
	body     any // marshalled to JSON when non-nil
	raw      []byte
	// timeout overrides the attempt timeout (a long poll's wait plus a
	// margin).
	timeout time.Duration
	// attempts, when positive, is the attempt budget of this call (the
	// consume loop's pops: one, the loop retries on its own).
	attempts int
	// once marks a request the broker does not apply idempotently
	// (transaction, DLQ replay) or that must not be repeated once it may
	// have been applied (a pop, whose claim leases messages): never
	// retried once it may have reached the broker, and any answer that
	// leaves its outcome open is an error matching ErrOutcomeUnknown (see
	// do).
	once bool
	// key is the routing key under Affinity (see balance.go); empty: any
	// broker URL.
	key string
}

// response is what do returns on any HTTP answer.
type response struct {
	status int
	header http.Header
	body   []byte
	url    string // the URL requested: base URL and path
}

// do sends a request and returns the answer. Any 2xx is returned as is; any
// other status becomes a *BrokerError. A returned error without an answer is
// a transport failure (retries spent, ctx ended, or closed client).
//
// For a request marked once, the transport retries only what surely did
// not reach the broker (see transport.Request.NoRetryAfterSend), and the
// error matches ErrOutcomeUnknown when the outcome is open: a failure after
// the request may have been sent, and a refusal after which the broker may
// have applied it (transport.MayHaveApplied: a 5xx but 501, 503 and 507, a
// 503 with code outcome_unknown).
func (c *Client) do(ctx context.Context, r call) (*response, error) {
	if !c.enter() {
		return nil, ErrClosed
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
	out := &response{status: resp.Status, header: resp.Header, body: resp.Body, url: resp.URL + r.path}
	if resp.Status < 200 || resp.Status > 299 {
		be := brokerError(r.method, r.path, out)
		be.Attempts = resp.Attempts
		if r.once && transport.MayHaveApplied(resp.Status, resp.Body) {
			return out, outcomeUnknown(be)
		}
		return out, be
	}
	return out, nil
}

// doJSON sends a request and decodes a 2xx JSON answer into out (if out is
// non-nil and the answer has a body).
func (c *Client) doJSON(ctx context.Context, r call, out any) (*response, error) {
	resp, err := c.do(ctx, r)
	if err != nil {
		return resp, err
	}
	return resp, decodeAnswer(resp, r, out)
}

// decodeAnswer decodes a 2xx JSON answer into out (if out is non-nil and
// the answer has a body); a body that does not decode is a *BrokerError.
func decodeAnswer(resp *response, r call, out any) error {
	if out != nil && len(bytes.TrimSpace(resp.body)) > 0 {
		if err := json.Unmarshal(resp.body, out); err != nil {
			return resp.refusal(r.method, r.path, "undecodable answer: "+err.Error())
		}
	}
	return nil
}

// refusal is the *BrokerError of a 2xx answer that says the request
// failed or cannot be read.
func (resp *response) refusal(method, path, msg string) *BrokerError {
	return &BrokerError{Status: resp.status, Method: method, Path: path, URL: resp.url, Body: resp.body, Message: msg}
}

// doObject is doJSON for routes whose 2xx answer is never the broker's
// error envelope: a body such as {"error":"..."} (with no "success", or
// success false), which a 0.15.1 broker sends with HTTP 200 for a failure,
// is returned as a *BrokerError instead of being decoded into out.
func (c *Client) doObject(ctx context.Context, r call, out any) (*response, error) {
	resp, err := c.do(ctx, r)
	if err != nil {
		return resp, err
	}
	if be := errorObject(resp, r.method, r.path); be != nil {
		return resp, be
	}
	return resp, decodeAnswer(resp, r, out)
}

// errorObject returns the refusal a 2xx answer carries when its body is the
// broker's error envelope: an object whose "error" is a non-empty string and
// whose "success", if present, is false. It returns nil for anything else.
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

// brokerError is the refusal of a non-2xx answer to method path: the
// broker's code and message from its error envelope, or else an excerpt of
// the body (a proxy's HTML page, say), and its Retry-After.
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

// excerptLen is how much of a body an error's message quotes.
const excerptLen = 200

// excerpt returns the start of body as one line of text: white space runs
// (new lines included) as one space, control characters and invalid UTF-8
// dropped, at most excerptLen bytes, with "…" when it was cut.
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
