package queen

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
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
	start := time.Now()
	_, err = c.Queue("q").Push(1).Execute(context.Background())
	require.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second)
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
