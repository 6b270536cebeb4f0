package transport

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// ---- helpers ----

// fakeClock is the Transport's clock in tests; the fake sleep advances it.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// waitLog records the waits a Transport logs before its retries (the
// "retrying" Debug record of its Backoff hook).
type waitLog struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (w *waitLog) Enabled(context.Context, slog.Level) bool { return true }
func (w *waitLog) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *waitLog) WithGroup(string) slog.Handler            { return w }
func (w *waitLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "wait" {
			w.mu.Lock()
			w.waits = append(w.waits, a.Value.Duration())
			w.mu.Unlock()
		}
		return true
	})
	return nil
}

func (w *waitLog) Waits() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.waits...)
}

// newTransport builds a Transport on cfg with a fake clock (for the URLs'
// health and Retry-After dates) and, unless cfg sets its own Logger, a
// logger that records the waits. Without a backoff in cfg, the waits are
// short (1 to 2 ms): tests of their lengths call backoff itself, or run in
// a synctest bubble.
func newTransport(t *testing.T, cfg Config) (*Transport, *waitLog, *fakeClock) {
	t.Helper()
	clock := &fakeClock{now: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	wl := &waitLog{}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(wl)
	}
	if cfg.Retry.MinBackoff == 0 && cfg.Retry.MaxBackoff == 0 {
		cfg.Retry.MinBackoff, cfg.Retry.MaxBackoff = time.Millisecond, 2*time.Millisecond
	}
	tr, err := New(cfg)
	require.NoError(t, err)
	tr.now = clock.Now
	t.Cleanup(tr.Close)
	return tr, wl, clock
}

type recorded struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
}

// server is an httptest server whose handler sees the index of each
// request (from 0) and records every request.
type server struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

func newServer(t *testing.T, h func(n int, w http.ResponseWriter, r *http.Request)) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		n := len(s.reqs)
		s.reqs = append(s.reqs, recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Clone(), body})
		s.mu.Unlock()
		h(n, w, r)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) Hits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.reqs)
}

func (s *server) Requests() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.reqs...)
}

// reply writes status, the header pairs kv and a small JSON body.
func reply(w http.ResponseWriter, status int, kv ...string) {
	for i := 0; i+1 < len(kv); i += 2 {
		w.Header().Set(kv[i], kv[i+1])
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, `{"status":`+strconv.Itoa(status)+`}`)
}

// drop closes the connection without any answer: a network error for the
// client.
func drop() { panic(http.ErrAbortHandler) }

// refusingURL returns the URL of a port nobody listens on.
func refusingURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	u := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	return u
}

var okBody = `{"ok":true}`

// ---- tests ----

func TestRetriesTransientFailuresThenSucceeds(t *testing.T) {
	tests := []struct {
		name string
		fail func(w http.ResponseWriter)
	}{
		{"503", func(w http.ResponseWriter) { reply(w, http.StatusServiceUnavailable) }},
		{"500", func(w http.ResponseWriter) { reply(w, http.StatusInternalServerError) }},
		{"502", func(w http.ResponseWriter) { reply(w, http.StatusBadGateway) }},
		{"507", func(w http.ResponseWriter) { reply(w, http.StatusInsufficientStorage) }},
		{"429", func(w http.ResponseWriter) { reply(w, http.StatusTooManyRequests) }},
		{"connection dropped", func(http.ResponseWriter) { drop() }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
				if n < 2 {
					tc.fail(w)
					return
				}
				_, _ = io.WriteString(w, okBody)
			})
			tr, sl, _ := newTransport(t, Config{URLs: []string{srv.URL}})

			resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/api/v1/x"})
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.Status)
			assert.JSONEq(t, okBody, string(resp.Body))
			assert.Equal(t, srv.URL, resp.URL)
			assert.Equal(t, 3, srv.Hits())
			assert.Len(t, sl.Waits(), 2, "one wait before each retry")
		})
	}
}

func TestBackoffIsCappedExponentialWithJitter(t *testing.T) {
	for _, tc := range []struct {
		name string
		rand float64
		want []int // milliseconds
	}{
		{"middle", 0.5, []int{100, 200, 400, 800, 1000, 1000}},
		{"low jitter -20%", 0, []int{80, 160, 320, 640, 800, 800}},
		{"high jitter +20% capped", 0.999999, []int{119, 239, 479, 959, 1000, 1000}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for n, want := range tc.want {
				got := backoff(100*time.Millisecond, time.Second, n, 0, tc.rand)
				assert.Equal(t, want, int(got/time.Millisecond), "wait %d in ms", n)
			}
		})
	}
	assert.Equal(t, time.Second, backoff(100*time.Millisecond, time.Second, 1000, 0, 0.5), "no overflow")
	for range 100 { // the random draw stays in the jitter's bounds
		d := Backoff(100*time.Millisecond, time.Second, 1, 0)
		assert.True(t, d >= 160*time.Millisecond && d <= 240*time.Millisecond, "%v", d)
	}
}

func TestRetryAfterIsHonoured(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name       string
		retryAfter string
		want       time.Duration // first wait of the default policy; jitter at rand 0.5 adds 10 %
	}{
		{"whole seconds", "2", 2200 * time.Millisecond},
		{"one second", "1", 1100 * time.Millisecond},
		{"fractional seconds", "0.5", 550 * time.Millisecond},
		{"HTTP date", now.Add(10 * time.Second).Format(http.TimeFormat), 11 * time.Second},
		{"date in the past waits MinBackoff", now.Add(-time.Hour).Format(http.TimeFormat), 200 * time.Millisecond},
		{"zero waits MinBackoff", "0", 200 * time.Millisecond},
		{"capped", "3600", MaxRetryAfter},
		{"capped after jitter", "59", MaxRetryAfter},
		{"unparseable falls back to backoff", "soon", 200 * time.Millisecond},
		{"negative falls back to backoff", "-3", 200 * time.Millisecond},
		{"longer than exponential backoff wins", "7", 7700 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ra, _ := ParseRetryAfter(tc.retryAfter, now)
			assert.Equal(t, tc.want, backoff(DefaultMinBackoff, DefaultMaxBackoff, 0, ra, 0.5))
		})
	}
	// The exponential wait wins when it is the longer one.
	assert.Equal(t, 1600*time.Millisecond, backoff(DefaultMinBackoff, DefaultMaxBackoff, 3, time.Second, 0.5))
}

// The transport waits what Backoff says with the answer's Retry-After,
// for 429, 503 and any other retryable answer, before the next attempt
// (in a bubble: the waits are the fake clock's).
func TestTransportWaitsRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		status   int
		header   string
		min, max time.Duration
	}{
		{429, "2", 2 * time.Second, 2400 * time.Millisecond},
		{503, "1", time.Second, 1200 * time.Millisecond},
		{500, "7", 7 * time.Second, 8400 * time.Millisecond},
		{429, "3600", MaxRetryAfter, MaxRetryAfter},
		{503, "", 160 * time.Millisecond, 240 * time.Millisecond}, // no header: MinBackoff, jittered
	} {
		t.Run(strconv.Itoa(tc.status)+" "+tc.header, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var at []time.Time
				rt := roundTripFunc(func(*http.Request) (*http.Response, error) {
					at = append(at, time.Now())
					if len(at) == 1 {
						h := http.Header{}
						if tc.header != "" {
							h.Set("Retry-After", tc.header)
						}
						return &http.Response{StatusCode: tc.status, Header: h, Body: io.NopCloser(strings.NewReader(`{}`))}, nil
					}
					return &http.Response{StatusCode: 200, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(okBody))}, nil
				})
				tr, err := New(Config{URLs: []string{"http://broker.invalid"}, HTTPClient: &http.Client{Transport: rt}})
				require.NoError(t, err)
				resp, err := tr.Do(context.Background(), Request{Method: http.MethodPost, Path: "/api/v1/push", Body: []byte(`{}`)})
				require.NoError(t, err)
				assert.Equal(t, http.StatusOK, resp.Status)
				require.Len(t, at, 2)
				wait := at[1].Sub(at[0])
				assert.True(t, wait >= tc.min && wait <= tc.max, "waited %v, want %v to %v", wait, tc.min, tc.max)
			})
		})
	}
}

func TestRetryAfterNeverShortened(t *testing.T) {
	// Whatever the jitter draws, the wait is at least what the broker asked.
	for _, r := range []float64{0, 0.25, 0.5, 0.999} {
		w := backoff(DefaultMinBackoff, DefaultMaxBackoff, 0, 3*time.Second, r)
		assert.GreaterOrEqual(t, w, 3*time.Second, "rand %v", r)
		assert.LessOrEqual(t, w, 3600*time.Millisecond, "rand %v", r)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"1", time.Second, true},
		{" 5 ", 5 * time.Second, true},
		{"1.25", 1250 * time.Millisecond, true},
		{".5", 500 * time.Millisecond, true},
		{"0", 0, true},
		{"61", 61 * time.Second, true},
		{"99999999999999999999999", math.MaxInt64, true},
		{now.Add(30 * time.Second).Format(http.TimeFormat), 30 * time.Second, true},
		{now.Add(30 * time.Second).Format(time.RFC850), 30 * time.Second, true},
		{now.Add(time.Hour).Format(http.TimeFormat), time.Hour, true},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0, true},
		{"", 0, false},
		{"-1", 0, false},
		{"1e3", 0, false},
		{"1.2.3", 0, false},
		{".", 0, false},
		{"NaN", 0, false},
		{"tomorrow", 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, ok := ParseRetryAfter(tc.in, now)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestClientErrorsAreNotRetried(t *testing.T) {
	for _, status := range []int{400, 401, 403, 404, 409, 413, 501, 505, 511} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
				reply(w, status, "Retry-After", "1")
			})
			tr, sl, _ := newTransport(t, Config{URLs: []string{srv.URL}})
			for _, once := range []bool{false, true} {
				resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x", NoRetryAfterSend: once})
				require.NoError(t, err, "a status is an answer, not an error")
				assert.Equal(t, status, resp.Status)
				assert.JSONEq(t, `{"status":`+strconv.Itoa(status)+`}`, string(resp.Body))
				assert.Equal(t, "1", resp.Header.Get("Retry-After"))
			}
			assert.Equal(t, 2, srv.Hits(), "one request per call")
			assert.Empty(t, sl.Waits())
		})
	}
}

func TestOrdinaryCallsAreBounded(t *testing.T) {
	t.Run("last answer returned", func(t *testing.T) {
		for _, maxAttempts := range []int{1, 3, 0} {
			srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { reply(w, http.StatusServiceUnavailable) })
			tr, sl, _ := newTransport(t, Config{URLs: []string{srv.URL}, Retry: RetryPolicy{MaxAttempts: maxAttempts}})
			resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"})
			require.NoError(t, err)
			assert.Equal(t, http.StatusServiceUnavailable, resp.Status)
			assert.JSONEq(t, `{"status":503}`, string(resp.Body), "the last answer's body is intact")
			want := maxAttempts
			if want == 0 {
				want = DefaultMaxAttempts
			}
			assert.Equal(t, want, srv.Hits())
			assert.Len(t, sl.Waits(), want-1)
		}
	})
	t.Run("earlier answer kept when later attempts get none", func(t *testing.T) {
		var down atomic.Bool
		srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			if down.Swap(true) {
				drop()
			}
			reply(w, http.StatusTooManyRequests, "Retry-After", "1")
		})
		tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}, Retry: RetryPolicy{MaxAttempts: 3}})
		// POST: net/http would silently resend a GET on a reused
		// connection that drops, which would blur the count.
		resp, err := tr.Do(context.Background(), Request{Method: http.MethodPost, Path: "/x", Body: []byte(`{}`)})
		require.NoError(t, err)
		assert.Equal(t, http.StatusTooManyRequests, resp.Status)
		assert.JSONEq(t, `{"status":429}`, string(resp.Body))
		assert.Equal(t, srv.URL, resp.URL)
		assert.Equal(t, 3, srv.Hits())
	})
	t.Run("no answer at all", func(t *testing.T) {
		tr, sl, _ := newTransport(t, Config{URLs: []string{refusingURL(t)}, Retry: RetryPolicy{MaxAttempts: 3}})
		resp, err := tr.Do(context.Background(), Request{Method: http.MethodPost, Path: "/api/v1/ack", Body: []byte(`{}`)})
		require.Error(t, err)
		assert.Nil(t, resp)
		assert.ErrorIs(t, err, syscall.ECONNREFUSED)
		assert.NotErrorIs(t, err, context.Canceled)
		assert.Contains(t, err.Error(), "POST http://127.0.0.1:")
		assert.Contains(t, err.Error(), "/api/v1/ack: ", "the URL requested")
		assert.Contains(t, err.Error(), "3 attempt(s)")
		assert.Len(t, sl.Waits(), 2)
	})
}

// A long poll (a waiting pop: a GET with its own timeout, not resent once
// it may have reached the broker) has the attempt budget of every other
// call: a broker that refuses connections or answers 503 ends it after
// MaxAttempts attempts, with the error or the last answer.
func TestLongPollIsBounded(t *testing.T) {
	pop := Request{Method: http.MethodGet, Path: "/api/v1/pop/queue/q", Timeout: 35 * time.Second, NoRetryAfterSend: true}
	t.Run("refused", func(t *testing.T) {
		tr, sl, _ := newTransport(t, Config{URLs: []string{refusingURL(t)}, Retry: RetryPolicy{MaxAttempts: 3}})
		resp, err := tr.Do(context.Background(), pop)
		require.Error(t, err)
		assert.Nil(t, resp)
		assert.ErrorIs(t, err, syscall.ECONNREFUSED)
		assert.NotErrorIs(t, err, ErrOutcomeUnknown, "a refused connection sent nothing")
		assert.Contains(t, err.Error(), "/api/v1/pop/queue/q: no answer after 3 attempt(s)")
		assert.Len(t, sl.Waits(), 2)
	})
	t.Run("503", func(t *testing.T) {
		srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { reply(w, http.StatusServiceUnavailable) })
		tr, sl, _ := newTransport(t, Config{URLs: []string{srv.URL}, Retry: RetryPolicy{MaxAttempts: 2}})
		resp, err := tr.Do(context.Background(), pop)
		require.NoError(t, err)
		assert.Equal(t, http.StatusServiceUnavailable, resp.Status)
		assert.Equal(t, 2, resp.Attempts)
		assert.Equal(t, 2, srv.Hits())
		assert.Len(t, sl.Waits(), 1)
	})
}

func TestFailover(t *testing.T) {
	t.Run("dropping URL, then back after the pause", func(t *testing.T) {
		var aDown atomic.Bool
		aDown.Store(true)
		a := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			if aDown.Load() {
				drop()
			}
			_, _ = io.WriteString(w, okBody)
		})
		b := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
		tr, sl, clock := newTransport(t, Config{URLs: []string{a.URL, b.URL}, Retry: RetryPolicy{FailoverPause: 5 * time.Second}})
		do := func() *Response {
			t.Helper()
			resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"})
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.Status)
			return resp
		}

		assert.Equal(t, b.URL, do().URL)
		assert.Equal(t, 1, a.Hits())
		assert.Equal(t, 1, b.Hits())
		assert.Len(t, sl.Waits(), 1)

		// Within the pause: straight to b, a is not tried.
		clock.Advance(4 * time.Second)
		assert.Equal(t, b.URL, do().URL)
		assert.Equal(t, 1, a.Hits())
		assert.Equal(t, 2, b.Hits())

		// After the pause a is preferred again (and answers now).
		aDown.Store(false)
		clock.Advance(2 * time.Second)
		assert.Equal(t, a.URL, do().URL)
		assert.Equal(t, 2, a.Hits())
		assert.Equal(t, 2, b.Hits())
		assert.Len(t, sl.Waits(), 1, "no wait when the preferred URL answers")
	})

	t.Run("refusing URL", func(t *testing.T) {
		b := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
		tr, _, _ := newTransport(t, Config{URLs: []string{refusingURL(t), b.URL}})
		for range 3 {
			resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"})
			require.NoError(t, err)
			assert.Equal(t, b.URL, resp.URL)
		}
		assert.Equal(t, 3, b.Hits())
	})

	t.Run("5xx fails over, 429 stays", func(t *testing.T) {
		for _, tc := range []struct {
			status   int
			wantURLs string
		}{
			{http.StatusInternalServerError, "ab"},
			{http.StatusServiceUnavailable, "ab"},
			{http.StatusTooManyRequests, "aa"},
		} {
			var order strings.Builder
			var mu sync.Mutex
			mk := func(name string) *server {
				return newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
					mu.Lock()
					order.WriteString(name)
					first := order.Len() == 1
					mu.Unlock()
					if first {
						reply(w, tc.status)
						return
					}
					_, _ = io.WriteString(w, okBody)
				})
			}
			a, b := mk("a"), mk("b")
			tr, _, _ := newTransport(t, Config{URLs: []string{a.URL, b.URL}})
			resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"})
			require.NoError(t, err)
			assert.Equal(t, http.StatusOK, resp.Status)
			assert.Equal(t, tc.wantURLs, order.String(), "status %d", tc.status)
		}
	})

	t.Run("501 is an answer, no failover", func(t *testing.T) {
		a := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { reply(w, http.StatusNotImplemented) })
		b := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
		tr, _, _ := newTransport(t, Config{URLs: []string{a.URL, b.URL}})
		for range 2 {
			resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"})
			require.NoError(t, err)
			assert.Equal(t, http.StatusNotImplemented, resp.Status)
		}
		assert.Equal(t, 2, a.Hits())
		assert.Equal(t, 0, b.Hits())
	})

	t.Run("cancelling a call in flight does not mark its URL down", func(t *testing.T) {
		a := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
			if n == 0 {
				<-r.Context().Done() // a long poll the caller abandons
				return
			}
			_, _ = io.WriteString(w, okBody)
		})
		b := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
		tr, _, _ := newTransport(t, Config{URLs: []string{a.URL, b.URL}})
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(50*time.Millisecond, cancel)
		_, err := tr.Do(ctx, Request{Method: http.MethodGet, Path: "/pop"})
		require.ErrorIs(t, err, context.Canceled)

		resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"})
		require.NoError(t, err)
		assert.Equal(t, a.URL, resp.URL)
		assert.Equal(t, 0, b.Hits())
	})

	t.Run("all down: least recently failed first", func(t *testing.T) {
		var order strings.Builder
		var mu sync.Mutex
		mk := func(name string) *server {
			return newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
				mu.Lock()
				order.WriteString(name)
				mu.Unlock()
				reply(w, http.StatusInternalServerError)
			})
		}
		a, b, c := mk("a"), mk("b"), mk("c")
		tr, _, _ := newTransport(t, Config{URLs: []string{a.URL, b.URL, c.URL},
			Retry: RetryPolicy{MaxAttempts: 7, FailoverPause: time.Hour}})
		resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"})
		require.NoError(t, err)
		assert.Equal(t, http.StatusInternalServerError, resp.Status)
		assert.Equal(t, "abcabca", order.String())
		assert.Equal(t, a.URL, resp.URL)
	})
}

func TestHeadersAndWireShape(t *testing.T) {
	srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
	tests := []struct {
		name  string
		cfg   Config
		req   Request
		check func(t *testing.T, r recorded)
	}{
		{"bearer, body, query", Config{BearerToken: "s3cret", UserAgent: "queen-go/test"},
			Request{Method: http.MethodPost, Path: "/api/v1/pop/queue/orders", Query: url.Values{"batch": {"10"}, "wait": {"true"}}, Body: []byte(`{"a":1}`)},
			func(t *testing.T, r recorded) {
				assert.Equal(t, "Bearer s3cret", r.Header.Get("Authorization"))
				assert.Equal(t, "application/json", r.Header.Get("Content-Type"))
				assert.Equal(t, "application/json", r.Header.Get("Accept"))
				assert.Equal(t, "queen-go/test", r.Header.Get("User-Agent"))
				assert.Equal(t, http.MethodPost, r.Method)
				assert.Equal(t, "/api/v1/pop/queue/orders", r.Path)
				assert.Equal(t, "batch=10&wait=true", r.RawQuery)
				assert.Equal(t, `{"a":1}`, string(r.Body))
			}},
		{"query encoded by the caller", Config{},
			Request{Method: http.MethodGet, Path: "/api/v1/pop/queue/orders", RawQuery: "batch=10&wait=true"},
			func(t *testing.T, r recorded) {
				assert.Equal(t, "/api/v1/pop/queue/orders", r.Path)
				assert.Equal(t, "batch=10&wait=true", r.RawQuery)
			}},
		{"no token, no body", Config{},
			Request{Method: http.MethodGet, Path: "/health"},
			func(t *testing.T, r recorded) {
				assert.NotContains(t, r.Header, "Authorization")
				assert.NotContains(t, r.Header, "Content-Type")
				assert.Equal(t, "application/json", r.Header.Get("Accept"))
				assert.Empty(t, r.RawQuery)
				assert.Empty(t, r.Body)
			}},
		{"escaped path kept", Config{},
			Request{Method: http.MethodDelete, Path: "/api/v1/resources/queues/a%2Fb"},
			func(t *testing.T, r recorded) {
				assert.Equal(t, http.MethodDelete, r.Method)
				assert.Equal(t, "/api/v1/resources/queues/a/b", r.Path)
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := srv.Hits()
			tc.cfg.URLs = []string{srv.URL + "/"}
			tr, _, _ := newTransport(t, tc.cfg)
			resp, err := tr.Do(context.Background(), tc.req)
			require.NoError(t, err)
			assert.Equal(t, srv.URL, resp.URL, "trailing slash trimmed")
			reqs := srv.Requests()
			require.Len(t, reqs, before+1)
			tc.check(t, reqs[before])
		})
	}

	t.Run("bearer on every retry and after failover", func(t *testing.T) {
		a := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { reply(w, http.StatusBadGateway) })
		b := newServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
			if n == 0 {
				reply(w, http.StatusTooManyRequests)
				return
			}
			_, _ = io.WriteString(w, okBody)
		})
		tr, _, _ := newTransport(t, Config{URLs: []string{a.URL, b.URL}, BearerToken: "tok"})
		_, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"})
		require.NoError(t, err)
		all := append(a.Requests(), b.Requests()...)
		require.Len(t, all, 3)
		for _, r := range all {
			assert.Equal(t, "Bearer tok", r.Header.Get("Authorization"))
		}
	})

	t.Run("base path prefix", func(t *testing.T) {
		tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL + "/queen/"}})
		before := srv.Hits()
		resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/api/v1/x"})
		require.NoError(t, err)
		assert.Equal(t, srv.URL+"/queen", resp.URL)
		assert.Equal(t, "/queen/api/v1/x", srv.Requests()[before].Path)
	})
}

func TestBodyResentIdentically(t *testing.T) {
	// Larger than retryablehttp's 4 KiB drain limit and not ASCII only.
	body := []byte(`{"items":[` + strings.Repeat(`{"payload":"héllo ✓ \u0000"},`, 400) + `{}]}`)
	a := newServer(t, func(_ int, _ http.ResponseWriter, _ *http.Request) { drop() })
	b := newServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 0 {
			reply(w, http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `[]`)
	})
	// Attempts: a (dropped), b (503), a again (least recently failed,
	// dropped), b (201).
	tr, _, _ := newTransport(t, Config{URLs: []string{a.URL, b.URL}})
	resp, err := tr.Do(context.Background(), Request{Method: http.MethodPost, Path: "/api/v1/push", Body: body})
	require.NoError(t, err)
	assert.Equal(t, http.StatusCreated, resp.Status)
	all := append(a.Requests(), b.Requests()...)
	require.Len(t, all, 4)
	for i, r := range all {
		assert.True(t, bytes.Equal(body, r.Body), "attempt %d body differs", i)
		assert.Equal(t, strconv.Itoa(len(body)), r.Header.Get("Content-Length"), "attempt %d", i)
	}
}

func TestCtxEndsDuringBackoff(t *testing.T) {
	answer := func(status int, kv ...string) func() (*http.Response, error) {
		return func() (*http.Response, error) {
			h := http.Header{}
			for i := 0; i+1 < len(kv); i += 2 {
				h.Set(kv[i], kv[i+1])
			}
			return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader(`{}`))}, nil
		}
	}
	tests := []struct {
		name    string
		answer  func() (*http.Response, error)
		ctx     func() (context.Context, context.CancelFunc)
		wantErr error
	}{
		{"cancel during exponential wait",
			answer(http.StatusServiceUnavailable),
			func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(100*time.Millisecond, cancel)
				return ctx, cancel
			}, context.Canceled},
		{"cancel during Retry-After wait",
			answer(http.StatusTooManyRequests, "Retry-After", "30"),
			func() (context.Context, context.CancelFunc) {
				ctx, cancel := context.WithCancel(context.Background())
				time.AfterFunc(100*time.Millisecond, cancel)
				return ctx, cancel
			}, context.Canceled},
		{"deadline during wait after network errors",
			func() (*http.Response, error) {
				return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
			},
			func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 150*time.Millisecond)
			}, context.DeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// On the bubble's clock, with the real timer of the wait
			// (Config.Sleep nil) and long waits: the ctx ends exactly
			// 100 or 150 ms after the first attempt, which took no time,
			// and within the 20 s backoff or the 30 s Retry-After.
			synctest.Test(t, func(t *testing.T) {
				var hits atomic.Int32
				rt := roundTripFunc(func(*http.Request) (*http.Response, error) {
					hits.Add(1)
					return tc.answer()
				})
				tr, err := New(Config{URLs: []string{"http://broker.invalid"}, HTTPClient: &http.Client{Transport: rt},
					Retry: RetryPolicy{MinBackoff: 20 * time.Second, MaxBackoff: 30 * time.Second}})
				require.NoError(t, err)
				defer tr.Close()
				ctx, cancel := tc.ctx()
				defer cancel()
				start := time.Now()
				resp, err := tr.Do(ctx, Request{Method: http.MethodGet, Path: "/x"})
				elapsed := time.Since(start)
				assert.Nil(t, resp)
				assert.ErrorIs(t, err, tc.wantErr)
				// A call that sat out its wait would take the 20 s backoff
				// or the 30 s Retry-After.
				want := 100 * time.Millisecond
				if tc.wantErr == context.DeadlineExceeded {
					want = 150 * time.Millisecond
				}
				assert.Equal(t, want, elapsed, "the call did not end with its ctx")
				assert.EqualValues(t, 1, hits.Load())
			})
		})
	}

	t.Run("already cancelled: nothing sent", func(t *testing.T) {
		srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
		tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := tr.Do(ctx, Request{Method: http.MethodGet, Path: "/x"})
		assert.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 0, srv.Hits())
	})

	t.Run("deadline too close for Retry-After: the answer is returned", func(t *testing.T) {
		srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
			reply(w, http.StatusTooManyRequests, "Retry-After", "30")
		})
		tr, sl, _ := newTransport(t, Config{URLs: []string{srv.URL}})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		resp, err := tr.Do(ctx, Request{Method: http.MethodPost, Path: "/api/v1/push", Body: []byte(`[]`)})
		require.NoError(t, err)
		assert.Equal(t, http.StatusTooManyRequests, resp.Status)
		assert.Equal(t, "30", resp.Header.Get("Retry-After"))
		assert.Empty(t, sl.Waits())
		assert.Equal(t, 1, srv.Hits())
	})
}

func TestPerAttemptTimeout(t *testing.T) {
	srv := newServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			select { // hang until the client gives up on this attempt
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		_, _ = io.WriteString(w, okBody)
	})
	tr, sl, _ := newTransport(t, Config{URLs: []string{srv.URL}, Timeout: 10 * time.Second})
	resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x", Timeout: 100 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.Status)
	// Two attempts: without the attempt's timeout the first would get the
	// server's empty 200 after 5 s and be the answer.
	assert.Equal(t, 2, srv.Hits())
	assert.Len(t, sl.Waits(), 1)
}

func TestBodyCutShortIsRetried(t *testing.T) {
	srv := newServer(t, func(n int, w http.ResponseWriter, _ *http.Request) {
		if n == 0 {
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, `{"messa`)
			w.(http.Flusher).Flush()
			drop()
		}
		_, _ = io.WriteString(w, okBody)
	})
	tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}})
	resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"})
	require.NoError(t, err)
	assert.JSONEq(t, okBody, string(resp.Body))
	assert.Equal(t, 2, srv.Hits())
}

func TestPoolKeepsIdleConns(t *testing.T) {
	t.Run("MaxIdleConnsPerHost", func(t *testing.T) {
		for _, tc := range []struct{ idle, want int }{{0, DefaultIdleConns}, {1, 1}, {64, 64}, {500, 500}} {
			tr, err := New(Config{URLs: []string{"http://a:1", "http://b:2"}, IdleConns: tc.idle})
			require.NoError(t, err)
			require.NotNil(t, tr.owned)
			assert.GreaterOrEqual(t, tr.owned.MaxIdleConnsPerHost, tc.want)
			assert.GreaterOrEqual(t, tr.owned.MaxIdleConns, 2*tc.want)
			tr.Close()
		}
	})

	t.Run("concurrent calls reuse their connections", func(t *testing.T) {
		const n = 40
		var newConns atomic.Int32
		var arrived atomic.Int32
		release := make(chan struct{})
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if arrived.Add(1) == n {
				close(release)
			}
			select {
			case <-release:
			case <-r.Context().Done():
			}
			_, _ = io.WriteString(w, okBody)
		}))
		srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				newConns.Add(1)
			}
		}
		srv.Start()
		defer srv.Close()
		tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}, IdleConns: n})

		wave := func() {
			var wg sync.WaitGroup
			for range n {
				wg.Go(func() {
					resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"})
					if assert.NoError(t, err) {
						assert.Equal(t, http.StatusOK, resp.Status)
					}
				})
			}
			wg.Wait()
		}
		wave()
		require.EqualValues(t, n, newConns.Load())
		// Second wave: all n connections were kept idle and are reused.
		arrived.Store(0)
		release = make(chan struct{})
		wave()
		assert.EqualValues(t, n, newConns.Load(), "no new connection for the second wave")
	})
}

// closeCounter is a user's RoundTripper that counts CloseIdleConnections.
type closeCounter struct {
	http.RoundTripper
	closes atomic.Int32
}

func (c *closeCounter) CloseIdleConnections() { c.closes.Add(1) }

func TestUsersClientIsLeftAlone(t *testing.T) {
	srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { reply(w, http.StatusServiceUnavailable) })
	base := http.DefaultTransport.(*http.Transport).Clone()
	defer base.CloseIdleConnections()
	rt := &closeCounter{RoundTripper: base}
	user := &http.Client{Transport: rt, Timeout: time.Hour}
	tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL, refusingURL(t)}, HTTPClient: user})
	assert.Nil(t, tr.owned)

	resp, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"})
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.Status)
	_, err = New(Config{URLs: []string{srv.URL}, HTTPClient: user})
	require.NoError(t, err)
	tr.Close()
	assert.Zero(t, rt.closes.Load(), "neither retries nor Close touch the user's pool")
	assert.Equal(t, time.Hour, user.Timeout, "the user's client is not modified")
	assert.Same(t, rt, user.Transport)
}

func TestLogging(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := newServer(t, func(_ int, _ http.ResponseWriter, _ *http.Request) { drop() })
	b := newServer(t, func(n int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
	tr, _, _ := newTransport(t, Config{URLs: []string{a.URL, b.URL}, Logger: logger, BearerToken: "tok-secret"})
	_, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"})
	require.NoError(t, err)
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	assert.Contains(t, out, "level=WARN")
	assert.Contains(t, out, "broker URL failing")
	assert.Contains(t, out, "level=DEBUG")
	assert.Contains(t, out, "retrying")
	assert.Contains(t, out, "failing over")
	assert.NotContains(t, out, "tok-secret")

	// retryablehttp's own logger (stderr by default) is off.
	assert.Nil(t, tr.newCall().rc.Logger)
}

type lockedWriter struct {
	w  io.Writer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		err  string
	}{
		{"no URL", Config{}, "no broker URL"},
		{"bad scheme", Config{URLs: []string{"ftp://h"}}, "want http(s)://host"},
		{"host:port without scheme", Config{URLs: []string{"localhost:6632"}}, "want http(s)://host"},
		{"no host", Config{URLs: []string{"http://"}}, "want http(s)://host"},
		{"unparseable", Config{URLs: []string{"http://h:x:y/%zz"}}, "broker URL"},
		{"query", Config{URLs: []string{"http://h/?a=1"}}, "query"},
		{"fragment", Config{URLs: []string{"http://h/#f"}}, "fragment"},
		{"user info", Config{URLs: []string{"http://u:p@h"}}, "user info"},
		{"second URL bad", Config{URLs: []string{"http://h", "h2"}}, `"h2": want http(s)://host`},
		{"negative timeout", Config{URLs: []string{"http://h"}, Timeout: -1}, "negative"},
		{"negative attempts", Config{URLs: []string{"http://h"}, Retry: RetryPolicy{MaxAttempts: -1}}, "negative"},
		{"min above max", Config{URLs: []string{"http://h"}, Retry: RetryPolicy{MinBackoff: time.Second, MaxBackoff: time.Millisecond}}, "MinBackoff"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := New(tc.cfg)
			assert.Nil(t, tr)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.err)
		})
	}

	t.Run("defaults", func(t *testing.T) {
		tr, err := New(Config{URLs: []string{"https://broker.example:6632/"}})
		require.NoError(t, err)
		defer tr.Close()
		assert.Equal(t, DefaultTimeout, tr.cfg.Timeout)
		assert.Equal(t, RetryPolicy{MaxAttempts: DefaultMaxAttempts, MinBackoff: DefaultMinBackoff,
			MaxBackoff: DefaultMaxBackoff, FailoverPause: DefaultFailoverPause}, tr.cfg.Retry)
		assert.NotNil(t, tr.cfg.Logger)
		_, base := tr.eps.pick("")
		assert.Equal(t, "https://broker.example:6632", base)
	})

	t.Run("bad request path", func(t *testing.T) {
		tr, _, _ := newTransport(t, Config{URLs: []string{"http://h"}})
		_, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "api/v1"})
		assert.ErrorContains(t, err, "must start with /")
	})
}

// Requests through the pool New built share one read-only header map per
// shape (with or without a body): many at once leave it as it was (-race
// sees any write).
func TestSharedHeadersStayUnchanged(t *testing.T) {
	srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
	tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}, UserAgent: "ua", BearerToken: "tok"})
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			r := Request{Method: http.MethodGet, Path: "/x", NoRetryAfterSend: i%3 == 0}
			if i%2 == 1 {
				r.Method, r.Body = http.MethodPost, []byte(`{}`)
			}
			_, err := tr.Do(context.Background(), r)
			assert.NoError(t, err)
		})
	}
	wg.Wait()
	want := http.Header{"Accept": {"application/json"}, "User-Agent": {"ua"}, "Authorization": {"Bearer tok"}}
	assert.Equal(t, want, tr.header[0])
	want.Set("Content-Type", "application/json")
	assert.Equal(t, want, tr.header[1])
	for _, r := range srv.Requests() {
		assert.Equal(t, "Bearer tok", r.Header.Get("Authorization"))
	}
}

// Every request gets a header of its own: a user's RoundTripper that
// writes into it (against http.RoundTripper's contract) changes no other
// request.
func TestHeaderPerRequest(t *testing.T) {
	srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
	var seen []string
	rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		seen = append(seen, r.Header.Get("X-Mark"))
		r.Header.Set("X-Mark", "written") // against the contract
		return http.DefaultTransport.RoundTrip(r)
	})
	tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}, HTTPClient: &http.Client{Transport: rt}})
	for range 2 {
		_, err := tr.Do(context.Background(), Request{Method: http.MethodGet, Path: "/x"})
		require.NoError(t, err)
	}
	assert.Equal(t, []string{"", ""}, seen)
}

// Redirects are followed by http.Client, with its default policy: a 307
// keeps the method and the body, a 302 goes on with GET, and a hop to
// another host goes without the credentials.
func TestRedirectsFollowedByHTTPClient(t *testing.T) {
	var srvURL string
	srv := newServer(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/307":
			w.Header().Set("Location", "/new")
			w.WriteHeader(http.StatusTemporaryRedirect)
		case "/302":
			w.Header().Set("Location", "/new")
			w.WriteHeader(http.StatusFound)
		case "/away":
			w.Header().Set("Location", strings.Replace(srvURL, "127.0.0.1", "localhost", 1)+"/new")
			w.WriteHeader(http.StatusTemporaryRedirect)
		default:
			_, _ = io.WriteString(w, okBody)
		}
	})
	srvURL = srv.URL
	tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}, BearerToken: "tok"})
	for _, path := range []string{"/307", "/302", "/away"} {
		resp, err := tr.Do(context.Background(), Request{Method: http.MethodPost, Path: path, Body: []byte(`{"a":1}`)})
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.Status, path)
		assert.Equal(t, 1, resp.Attempts, "a redirect is part of its attempt")
	}
	reqs := srv.Requests()
	require.Len(t, reqs, 6)
	got := func(r recorded) string {
		return r.Method + " " + r.Path + " " + string(r.Body) + " auth=" + r.Header.Get("Authorization")
	}
	assert.Equal(t, "POST /new {\"a\":1} auth=Bearer tok", got(reqs[1]))
	assert.Equal(t, "GET /new  auth=Bearer tok", got(reqs[3]))
	assert.Equal(t, "POST /new {\"a\":1} auth=", got(reqs[5]))
}

// tagCtx is a caller's ctx of a type that == cannot compare.
type tagCtx struct {
	context.Context
	tags []string
}

// A caller's ctx of a type that cannot be compared works like any other:
// with and without a deadline of its own, for a call and for a pop.
func TestUncomparableCallerCtx(t *testing.T) {
	srv := newServer(t, func(_ int, w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, okBody) })
	tr, _, _ := newTransport(t, Config{URLs: []string{srv.URL}})
	early, cancel := context.WithTimeout(context.Background(), time.Second) // before the attempt's deadline
	defer cancel()
	for _, parent := range []context.Context{context.Background(), early} {
		ctx := tagCtx{Context: parent, tags: []string{"x"}}
		for _, once := range []bool{false, true} {
			for range 2 {
				resp, err := tr.Do(ctx, Request{Method: http.MethodGet, Path: "/x", NoRetryAfterSend: once})
				require.NoError(t, err)
				assert.Equal(t, http.StatusOK, resp.Status)
			}
		}
	}
}
