package queen

import (
	"bytes"
	"context"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingRT counts the requests that go through the user's own client.
type countingRT struct {
	n    atomic.Int32
	next http.RoundTripper
}

func (c *countingRT) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.next.RoundTrip(r)
}

func TestWithHTTPClient(t *testing.T) {
	rec, _ := newRecorder(t, answer{status: 201, body: `[{"index":0,"status":"queued"}]`})
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	rt := &countingRT{next: tr}
	c, err := New(rec.srv.URL, WithHTTPClient(&http.Client{Transport: rt}))
	require.NoError(t, err)
	defer c.Close(context.Background())
	_, err = c.Queue("q").Push(1).Execute(context.Background())
	require.NoError(t, err)
	assert.Equal(t, int32(1), rt.n.Load())
}

func TestWithRequestTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	c, err := New(srv.URL, WithRequestTimeout(50*time.Millisecond), WithRetryPolicy(RetryPolicy{MaxAttempts: 1}))
	require.NoError(t, err)
	defer c.Close(context.Background())
	// The broker never answers: only the request timeout ends the call
	// (the 30 s below guards against a hang; it measures nothing).
	done := make(chan error, 1)
	go func() {
		_, err := c.Queue("q").Push(1).Execute(context.Background())
		done <- err
	}()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the request timeout did not end a call the broker never answers")
	}
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestWithLogger(t *testing.T) {
	var logs bytes.Buffer
	busy := answer{status: 503, body: golden(t, "broker-2.x/error_503_no_leader.json")}
	_, c := newRecorderOpts(t, []Option{
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		WithRetryPolicy(RetryPolicy{MaxAttempts: 2, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}),
	}, busy)
	_, err := c.Queue("q").Push(1).Execute(context.Background())
	require.Error(t, err)
	assert.NotEmpty(t, logs.String(), "retries are logged to the logger given")
}

// Close waits for the calls in flight, and stops waiting when its ctx
// ends, with ctx.Err(). Calls after Close fail with ErrClosed.
func TestCloseHonoursCtx(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`[{"index":0,"status":"queued"}]`))
	}))
	defer srv.Close()
	unblock := sync.OnceFunc(func() { close(release) })
	defer unblock() // before srv.Close, should the test fail early
	c, err := New(srv.URL, WithRetryPolicy(RetryPolicy{MaxAttempts: 1}))
	require.NoError(t, err)

	callErr := make(chan error, 1)
	go func() {
		_, err := c.Queue("q").Push(1).Execute(context.Background())
		callErr <- err
	}()
	<-arrived

	start := time.Now() // before the deadline is set: no pause can shorten the wait measured
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = c.Close(ctx)
	assert.ErrorIs(t, err, context.DeadlineExceeded, "a call is in flight")
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond, "Close waited for its ctx")
	_, err = c.Queue("q").Push(1).Execute(context.Background())
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, err, ErrNotSent, "nothing goes out after Close")

	// Without a deadline, Close returns once the call in flight is done.
	closed := make(chan error, 1)
	go func() { closed <- c.Close(context.Background()) }()
	select {
	case err := <-closed:
		t.Fatalf("Close = %v while a call is in flight", err)
	case <-time.After(20 * time.Millisecond):
	}
	unblock()
	require.NoError(t, <-callErr, "the call in flight got its answer")
	require.NoError(t, <-closed)

	// Nothing in flight: at once, even with an ended ctx.
	ended, cancelEnded := context.WithCancel(context.Background())
	cancelEnded()
	assert.NoError(t, c.Close(ended))
}

// The tests below replace process-wide defaults (http.DefaultTransport,
// slog.Default) and put them back. They must not call t.Parallel: a
// top-level test that does not runs while no other test of the package
// does (parallel tests wait until the sequential ones are done).

// New works whatever http.DefaultTransport is: the client builds its own
// pool with the standard settings and pops through it.
func TestNewWithWrappedDefaultTransport(t *testing.T) {
	orig := http.DefaultTransport
	// Not an *http.Transport, as an instrumentation library or a test mock
	// installs in http.DefaultTransport (countingRT, client_test.go).
	wrapped := &countingRT{next: orig}
	http.DefaultTransport = wrapped
	t.Cleanup(func() { http.DefaultTransport = orig })

	rec, _ := newRecorder(t, ok200(t, "broker-0.15.1/pop_queue_mode_three.json"))
	var c *Client
	require.NotPanics(t, func() {
		var err error
		c, err = New(rec.srv.URL, WithRetryPolicy(RetryPolicy{MaxAttempts: 1}))
		require.NoError(t, err)
	})
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	http.DefaultTransport = orig // the pool is built: nothing else needs the wrapper

	msgs, err := c.Queue("t1").Wait(false).Pop(context.Background())
	require.NoError(t, err)
	assert.Len(t, msgs, 3)
	assert.Equal(t, 1, rec.hits())
	assert.Zero(t, wrapped.n.Load(), "the client's own pool, not the replaced default")
}

// swapDefaultLogger makes slog.Default() write text records of every level
// to the returned buffer until the test ends. slog.SetDefault also
// redirects package log, which is put back too.
func swapDefaultLogger(t *testing.T) *syncBuffer {
	buf := &syncBuffer{}
	orig, out, flags := slog.Default(), log.Writer(), log.Flags()
	slog.SetDefault(slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() {
		slog.SetDefault(orig)
		log.SetOutput(out)
		log.SetFlags(flags)
	})
	return buf
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// failover makes a client with opts fail over from a dead URL to a live
// one, which logs a Warn (the failing URL) and Debug lines (the retry, the
// failover).
func failover(t *testing.T, opts ...Option) {
	t.Helper()
	live, _ := newRecorder(t, answer{status: 201, body: `[{"index":0,"status":"queued"}]`})
	dead, _ := newRecorder(t)
	dead.srv.Close()
	opts = append([]Option{WithURLs(live.srv.URL), WithLoadBalancing(InOrder),
		WithRetryPolicy(RetryPolicy{MaxAttempts: 2, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond})}, opts...)
	c, err := New(dead.srv.URL, opts...)
	require.NoError(t, err)
	defer c.Close(context.Background())
	_, err = c.Queue("q").Push(1).Execute(context.Background())
	require.NoError(t, err)
	require.Equal(t, 1, live.hits())
}

// Without WithLogger, Warn and Error records go to slog.Default(); Info
// and Debug do not.
func TestDefaultLoggerIsSlogDefaultFromWarn(t *testing.T) {
	buf := swapDefaultLogger(t)
	failover(t)
	logs := buf.String()
	assert.Contains(t, logs, "level=WARN")
	assert.Contains(t, logs, "broker URL failing")
	assert.NotContains(t, logs, "level=DEBUG")
	assert.NotContains(t, logs, "level=INFO")

	// The same default logger passes Error and drops Info.
	buf2 := swapDefaultLogger(t)
	c, err := New("http://127.0.0.1:1")
	require.NoError(t, err)
	defer c.Close(context.Background())
	c.log.With("k", "v").WithGroup("g").Error("boom", "a", 1)
	c.log.Info("chatter")
	assert.Contains(t, buf2.String(), `level=ERROR msg=boom k=v g.a=1`)
	assert.NotContains(t, buf2.String(), "chatter")
}

// WithLogger(slog.New(slog.DiscardHandler)) silences the client.
func TestDiscardLoggerSilences(t *testing.T) {
	buf := swapDefaultLogger(t)
	failover(t, WithLogger(slog.New(slog.DiscardHandler)))
	assert.Empty(t, buf.String())
}
