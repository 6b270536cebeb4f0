package queen

import (
	"bytes"
	"context"
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
